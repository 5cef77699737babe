package runner

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/agentsandbox/sandbox/port"
)

// UnreachableError is a runtime that did not answer at its address: what a driver's
// Detect returns. It matches port.ErrUnavailable.
type UnreachableError struct {
	Addr string
	Err  error
}

func (e *UnreachableError) Error() string {
	return "unreachable at " + e.Addr + ": " + FirstLine(e.Err.Error())
}

// Unwrap returns port.ErrUnavailable and the cause.
func (e *UnreachableError) Unwrap() []error { return []error{port.ErrUnavailable, e.Err} }

// FirstLine is s up to its first line break, at most 200 bytes: an engine's error
// in one line of a report.
func FirstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// QueryLoad is the query parameter of cluster targets naming the runtime their
// nodes load images from (port.ImageLoader), itself a target:
// "nomad://127.0.0.1:4646?load=docker://".
const QueryLoad = "load"

// OpenLoader opens the runtime a cluster target's load= names, for the cluster
// runner's WithImageLoader, and returns it with a Close that may be called more than
// once. It is nil, nil, nil when load is empty. A loader target without a
// registered driver is refused as OpenRuntime refuses it (the error names the
// adapter to import).
func OpenLoader(ctx context.Context, load string, cfg port.RuntimeConfig) (port.ImageLoader, func() error, error) {
	if load == "" {
		return nil, nil, nil
	}
	cfg.Bridge, cfg.Runtime = "", ""
	rt, err := port.OpenRuntime(ctx, load, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("load=%s: %w", load, err)
	}
	return rt, sync.OnceValue(rt.Close), nil
}
