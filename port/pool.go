package port

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
)

// Pooler is an optional capability of a SandboxRunner, found by type assertion: warm
// pools of sandboxes created ahead of time, each used for one run only.
//
// A pooled sandbox is created, locked down and left unstarted with its mounts in place
// before any run asks for it; a run claims one, attaches its identity and data (its
// workspace, its LLM socket, its argv, env and deadline), starts it, and the sandbox is
// deleted afterwards like any other. Nothing of one run is ever seen by another.
type Pooler interface {
	// WarmPool starts keeping opts.Size sandboxes ready for runs shaped like tmpl and
	// returns at once (the pool fills in the background). Errors wrap ErrInvalidSpec
	// for a bad template or options, ErrUnsupported when the runner cannot pool runs
	// of that shape.
	WarmPool(ctx context.Context, tmpl PoolTemplate, opts PoolOptions) (Pool, error)
}

// Pool is a SandboxRunner that serves runs matching its template (see TemplateOf) from
// pre-created sandboxes, and runs any other spec as its runner would. A run that finds
// the pool empty does not wait for it: it runs cold.
type Pool interface {
	SandboxRunner
	// Template is the shape of the runs the pool serves warm.
	Template() PoolTemplate
	// Stats counts the pool's sandboxes and runs.
	Stats() PoolStats
	// Close stops refilling, deletes the ready sandboxes and waits, until ctx ends,
	// for the deletions of used ones. Runs in progress finish; later runs run cold.
	Close(ctx context.Context) error
}

// PoolOptions size a pool.
type PoolOptions struct {
	// Size is how many sandboxes are kept ready (at least 1).
	Size int
	// RefillConcurrency bounds how many sandboxes are being created at once (default
	// 2): refilling competes with the runs for the machine.
	RefillConcurrency int
	// RefillBetweenRuns holds refilling while a run the pool served is in progress,
	// so a slot whose boot is heavy (a pre-booted runtime's warm-up) never competes
	// with the run claimed before it; the pool refills when no run of it is in
	// progress. For small machines and heavy preloads; runs that come faster than a
	// slot boots then find the pool empty and run cold.
	RefillBetweenRuns bool
}

// PoolStats counts a pool's sandboxes and runs.
type PoolStats struct {
	Ready    int   // sandboxes ready to claim
	Creating int   // sandboxes being created
	Warm     int64 // runs served from the pool
	Cold     int64 // runs of the pool's shape that found it empty
	Other    int64 // runs of another shape (always cold)
	Failed   int64 // sandboxes whose creation failed, or that died before their claim
	// PreloadFailed counts sandboxes discarded because their pre-booted runtime
	// exited, hung or wrote to stdout before its claim (also in Failed).
	PreloadFailed int64
}

// PoolTemplate is the shape of the runs a pool serves: what a sandbox fixes when it is
// created. The rest of a run (argv, env, timeout, output limit, labels, and the host
// directories behind its workspace, mounts and LLM socket) is attached when it is
// claimed.
type PoolTemplate struct {
	// Image is the image reference, as in RunSpec.
	Image string
	// User is "uid[:gid]", after RunSpec defaults.
	User string
	// Limits are the sandbox's limits; Timeout is not part of the shape (each run
	// brings its own deadline).
	Limits Limits
	// Workspace says a workspace is mounted at WorkspacePath.
	Workspace bool
	// Mounts are the extra mounts' targets and writability, in order.
	Mounts []PoolMount
	// LLM says an LLM socket directory is mounted at LLMSocketDir.
	LLM bool
	// Preload, if set, pre-boots the agent's runtime in every sandbox of the pool
	// (RunSpec.Preload): only runs asking for the same Preload are served by it.
	Preload *Preload
}

// PoolMount is the shape of an extra mount.
type PoolMount struct {
	// Target is the absolute path in the sandbox.
	Target string
	// Writable is Mount.Writable.
	Writable bool
}

// TemplateOf returns the shape of spec (after WithDefaults).
func TemplateOf(spec RunSpec) PoolTemplate {
	spec = spec.WithDefaults()
	t := PoolTemplate{Image: spec.Image, User: spec.User, Limits: spec.Limits, Workspace: spec.WorkspaceDir != "", LLM: spec.LLM != nil, Preload: spec.Preload.clone()}
	t.Limits.Timeout = 0
	for _, m := range spec.Mounts {
		t.Mounts = append(t.Mounts, PoolMount{Target: m.Target, Writable: m.Writable})
	}
	return t
}

// Key identifies the template: runs whose TemplateOf has the same Key are served by
// the same pool.
func (t PoolTemplate) Key() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\x00%s\x00%d/%d/%d/%d/%d\x00%v\x00%v", t.Image, t.User, t.Limits.MemoryBytes, t.Limits.PIDs, t.Limits.NanoCPUs, t.Limits.TmpfsBytes, t.Limits.OpenFiles, t.Workspace, t.LLM)
	for _, m := range t.Mounts {
		fmt.Fprintf(&b, "\x00%s:%v", m.Target, m.Writable)
	}
	if p := t.Preload; p != nil {
		fmt.Fprintf(&b, "\x00preload\x00%q\x00%d", p.Argv, p.Timeout)
		for _, m := range p.Mounts {
			fmt.Fprintf(&b, "\x00%q:%q", m.Source, m.Target)
		}
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:8])
}

// Spec returns a RunSpec of the template's shape, for validation: runID names it, and
// every host directory is a placeholder.
func (t PoolTemplate) Spec(runID string) RunSpec {
	s := RunSpec{RunID: runID, Image: t.Image, User: t.User, Limits: t.Limits, Argv: []string{"true"}}
	if t.Workspace {
		s.WorkspaceDir = "/"
	}
	for _, m := range t.Mounts {
		s.Mounts = append(s.Mounts, Mount{Source: "/", Target: m.Target, Writable: m.Writable})
	}
	if t.LLM {
		s.LLM = &LLMSocket{HostDir: "/"}
	}
	s.Preload = t.Preload.clone()
	return s.WithDefaults()
}

// Equal reports whether t and u are the same shape.
func (t PoolTemplate) Equal(u PoolTemplate) bool {
	return t.Image == u.Image && t.User == u.User && t.Limits == u.Limits && t.Workspace == u.Workspace && t.LLM == u.LLM && slices.Equal(t.Mounts, u.Mounts) && t.Preload.equal(u.Preload)
}

func (p *Preload) equal(q *Preload) bool {
	if p == nil || q == nil {
		return p == q
	}
	return slices.Equal(p.Argv, q.Argv) && slices.Equal(p.Mounts, q.Mounts) && p.Timeout == q.Timeout
}
