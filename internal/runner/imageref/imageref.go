// Package imageref parses the image references the runners pull: a repository with an
// optional tag and an optional pinned digest, normalised as Docker does.
package imageref

import (
	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"

	"github.com/agentsandbox/sandbox/port"
)

// Ref is a parsed image reference.
type Ref struct {
	// Name is the normalised repository, e.g. "127.0.0.1:5000/team/agent" or
	// "docker.io/library/nginx".
	Name string
	// Domain is the registry host, e.g. "127.0.0.1:5000" or "docker.io".
	Domain string
	// Tag is the tag ("latest" when neither tag nor digest was given); empty when
	// only a digest was given.
	Tag string
	// Digest is the pinned digest, if any.
	Digest digest.Digest
}

// Parse parses ref. A malformed reference wraps port.ErrInvalidSpec.
func Parse(ref string) (Ref, error) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return Ref{}, port.Invalidf("image reference %q: %v", ref, err)
	}
	r := Ref{Name: named.Name(), Domain: reference.Domain(named)}
	if t, ok := named.(reference.Tagged); ok {
		r.Tag = t.Tag()
	}
	if d, ok := named.(reference.Digested); ok {
		r.Digest = d.Digest()
		if err := r.Digest.Validate(); err != nil {
			return Ref{}, port.Invalidf("image reference %q: %v", ref, err)
		}
	}
	if r.Tag == "" && r.Digest == "" {
		r.Tag = "latest"
	}
	return r, nil
}

// Tagged is name:tag ("" without a tag).
func (r Ref) Tagged() string {
	if r.Tag == "" {
		return ""
	}
	return r.Name + ":" + r.Tag
}

// Pinned is name@digest ("" without a digest).
func (r Ref) Pinned() string {
	if r.Digest == "" {
		return ""
	}
	return r.Name + "@" + r.Digest.String()
}

// String is the full normalised reference: name[:tag][@digest].
func (r Ref) String() string {
	s := r.Name
	if r.Tag != "" {
		s += ":" + r.Tag
	}
	if r.Digest != "" {
		s += "@" + r.Digest.String()
	}
	return s
}
