package sandbox

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/port"
)

// sentinels are the error values the facade can return, by the name they are
// declared under (in errdefs, port or this package).
var sentinels = map[string]error{
	"ErrInvalidSpec": port.ErrInvalidSpec, "ErrNotFound": port.ErrNotFound, "ErrUnavailable": port.ErrUnavailable,
	"ErrUnsupported": port.ErrUnsupported, "ErrClosed": port.ErrClosed, "ErrTimeout": port.ErrTimeout,
	"ErrOOMKilled": port.ErrOOMKilled, "ErrContainerFailed": port.ErrContainerFailed, "ErrInternal": port.ErrInternal,
	"ErrRemoved": port.ErrRemoved, "ErrBudgetExceeded": port.ErrBudgetExceeded, "ErrUnattributed": port.ErrUnattributed,
	"ErrRejected": port.ErrRejected, "ErrPermissionDenied": port.ErrPermissionDenied, "ErrConflict": port.ErrConflict,
	"ErrDigestMismatch": port.ErrDigestMismatch, "ErrImageNotFound": port.ErrImageNotFound, "ErrNotPermitted": ErrNotPermitted,
	"ErrLogCorrupt": port.ErrLogCorrupt, "ErrPaused": port.ErrPaused,
}

// Every sentinel declared in errdefs, port or the facade has a hint: a new
// sentinel without one fails here.
func TestEverySentinelHasAHint(t *testing.T) {
	fset := token.NewFileSet()
	declared := map[string]string{}
	for _, dir := range []string{"errdefs", "port", "."} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, name, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok || g.Tok != token.VAR {
					continue
				}
				for _, sp := range g.Specs {
					for _, n := range sp.(*ast.ValueSpec).Names {
						if strings.HasPrefix(n.Name, "Err") && n.IsExported() {
							declared[n.Name] = name
						}
					}
				}
			}
		}
	}
	if len(declared) < len(sentinels) {
		t.Fatalf("found %d sentinels: %v", len(declared), declared)
	}
	for name, file := range declared {
		v, ok := sentinels[name]
		if !ok {
			t.Errorf("%s (%s) is not in this test's list: add it, and its hint", name, file)
			continue
		}
		if Hint(fmt.Errorf("op: %w", v)) == "" {
			t.Errorf("%s has no hint", name)
		}
	}
	// The most specific hint wins.
	if h := Hint(fmt.Errorf("x: %w", port.ErrImageNotFound)); !strings.Contains(h, "LoadImage") {
		t.Errorf("a missing image's hint is %q", h)
	}
}

// The facade's errors carry their hint once, and still match their sentinels.
func TestFacadeErrorsCarryTheirHint(t *testing.T) {
	s, _ := New(&fakeRunner{err: &port.OpError{Op: "fake.RunOnce", Err: fmt.Errorf("%w: image \"x\" is not there", port.ErrImageNotFound)}})
	req := request(t)
	_, err := s.Run(context.Background(), req)
	if !errors.Is(err, port.ErrImageNotFound) || !errors.Is(err, port.ErrNotFound) || strings.Count(err.Error(), "; hint: ") != 1 || !strings.Contains(err.Error(), "Sandbox.LoadImage") {
		t.Errorf("missing image: %v", err)
	}
	var oe *port.OpError
	if !errors.As(err, &oe) || oe.Op != "fake.RunOnce" {
		t.Errorf("errors.As no longer finds the runner's *OpError: %v", err)
	}
	req.Grant.AllowSandbox = false
	_, err = s.Run(context.Background(), req)
	if !errors.Is(err, ErrNotPermitted) || !strings.HasSuffix(err.Error(), "; hint: "+Hint(ErrNotPermitted)) {
		t.Errorf("no grant: %v", err)
	}
	if _, err := s.Start(context.Background(), SessionRequest{Request: request(t)}); !errors.Is(err, port.ErrUnsupported) || !strings.Contains(err.Error(), "; hint: ") {
		t.Errorf("no sessions: %v", err)
	}
	if _, err := s.LoadImage(context.Background(), strings.NewReader("")); !errors.Is(err, port.ErrUnsupported) || !strings.Contains(err.Error(), "; hint: ") {
		t.Errorf("LoadImage: %v", err)
	}
	if _, err := Open(context.Background(), "nosuch://", WithoutLLM()); !errors.Is(err, port.ErrInvalidSpec) || !strings.Contains(err.Error(), "; hint: change the field") {
		t.Errorf("Open: %v", err)
	}
}
