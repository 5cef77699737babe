package port

import (
	"slices"
	"strings"
	"time"
)

// Preload pre-boots an agent runtime in each sandbox of a warm pool, before any run
// exists: the sandbox's bridge starts Argv under the full lockdown with nothing of a
// run present, and hands it the run's argv, environment, directory and deadline at
// claim (the preload protocol, api/bridgeapi; package preload has a Node.js one).
type Preload struct {
	// Argv is the preload command, started in the sandbox before the claim.
	Argv []string
	// Mounts are host directories mounted read-only from the sandbox's creation: the
	// runtime's code (a package tree, say), never a run's data. Writable is refused.
	Mounts []Mount
	// Timeout bounds the runtime's boot, until it says it is ready (default 2 min).
	Timeout time.Duration
}

// Validate checks p. Errors wrap ErrInvalidSpec.
func (p *Preload) Validate() error {
	if p == nil {
		return nil
	}
	if len(p.Argv) == 0 || p.Argv[0] == "" {
		return Invalidf("preload: no command")
	}
	for i, a := range p.Argv {
		if strings.ContainsRune(a, 0) {
			return Invalidf("preload: argv[%d] contains a NUL byte", i)
		}
	}
	if p.Timeout < 0 {
		return Invalidf("preload: negative timeout")
	}
	for i, m := range p.Mounts {
		if m.Writable {
			return Invalidf("preload mount %d: writable; a pre-booted runtime's mounts are read-only", i)
		}
	}
	return nil
}

func (p *Preload) clone() *Preload {
	if p == nil {
		return nil
	}
	c := *p
	c.Argv = slices.Clone(p.Argv)
	c.Mounts = slices.Clone(p.Mounts)
	return &c
}

// ColdSpec is s as a runner without a pre-booted sandbox runs it: Preload's mounts
// join Mounts (read-only), Preload is dropped, Argv runs as given.
func (s RunSpec) ColdSpec() RunSpec {
	if s.Preload == nil {
		return s
	}
	s.Mounts = append(slices.Clone(s.Mounts), s.Preload.Mounts...)
	s.Preload = nil
	return s
}
