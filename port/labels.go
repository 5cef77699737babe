package port

import (
	"regexp"
	"strings"
)

// LabelPrefix is reserved: every container, volume, snapshot or directory the library
// creates carries labels under it, and callers may not set labels with this prefix.
const LabelPrefix = "dev.agentsandbox."

// Reserved label keys.
const (
	// LabelOwner names the host instance that created a resource (see sweep).
	LabelOwner = LabelPrefix + "owner"
	// LabelRunID is the run a resource belongs to.
	LabelRunID = LabelPrefix + "run-id"
	// LabelCreatedAt is the creation time, RFC 3339 in UTC.
	LabelCreatedAt = LabelPrefix + "created-at"
	// LabelKind says what the resource is for: KindSandbox, KindSession, KindPool or
	// KindProxy.
	LabelKind = LabelPrefix + "kind"
)

// Values of LabelKind.
const (
	KindSandbox = "sandbox"
	KindProxy   = "proxy"
	// KindPool is a warm pool's sandbox waiting for a run. A runtime that can relabel
	// a sandbox (containerd) makes a claimed one KindSandbox; one that cannot (Docker)
	// renames it after its run instead.
	KindPool = "pool"
)

// DefaultOwner is the owner label value used when a caller sets none.
const DefaultOwner = "default"

// MaxRunIDLen bounds run IDs; they end up in container, volume and directory names.
const MaxRunIDLen = 64

var (
	runIDRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)
	labelRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_./-]*$`)
)

// ValidateRunID reports whether id is a safe run ID: 1 to 64 characters of
// [A-Za-z0-9_.-], starting with a letter or digit. Run IDs are host-generated; this
// check is what lets them be used in names and paths. The error wraps ErrInvalidSpec.
func ValidateRunID(id string) error {
	switch {
	case id == "":
		return Invalidf("run id is empty")
	case len(id) > MaxRunIDLen:
		return Invalidf("run id is %d bytes, over the limit of %d", len(id), MaxRunIDLen)
	case !runIDRe.MatchString(id):
		return Invalidf("run id %q has characters outside [A-Za-z0-9_.-] or does not start with a letter or digit", id)
	}
	return nil
}

// ValidateLabels rejects caller labels that use the reserved prefix or have unsafe keys.
func ValidateLabels(labels map[string]string) error {
	for k, v := range labels {
		if strings.HasPrefix(k, LabelPrefix) {
			return Invalidf("label %q uses the reserved prefix %q", k, LabelPrefix)
		}
		if len(k) > 128 || !labelRe.MatchString(k) {
			return Invalidf("label key %q is not of the form [A-Za-z0-9][A-Za-z0-9_./-]{0,127}", k)
		}
		if len(v) > 1024 || strings.ContainsAny(v, "\x00\r\n") {
			return Invalidf("label %q has a value over 1024 bytes or with control characters", k)
		}
	}
	return nil
}
