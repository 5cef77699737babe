package sandboxbridge

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
)

func TestDeadlineFileMovesTheDeadline(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "deadline")
	start := time.Now()
	// The host moved the deadline 400 ms on (the bridge adds its slack to it).
	if err := os.WriteFile(file, bridgeapi.FormatDeadline(start.Add(400*time.Millisecond-bridgeapi.DeadlineSlack)), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := withDeadline(context.Background(), start.Add(100*time.Millisecond), file)
	defer cancel()
	<-ctx.Done()
	if took := time.Since(start); took < 390*time.Millisecond {
		t.Errorf("ended after %v, before the moved deadline", took)
	}
	if !errors.Is(context.Cause(ctx), bridgeapi.ErrDeadline) {
		t.Errorf("cause %v, want bridgeapi.ErrDeadline", context.Cause(ctx))
	}
}

func TestDeadlineFileRefusesWhatIsNotTheHostsFile(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	later := bridgeapi.FormatDeadline(time.Now().Add(time.Hour))
	if err := os.WriteFile(target, later, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, plant := range map[string]func(p string) error{
		"symlink": func(p string) error { return os.Symlink(target, p) },
		"fifo":    func(p string) error { return syscall.Mkfifo(p, 0o644) },
		"garbage": func(p string) error { return os.WriteFile(p, []byte("soon"), 0o644) },
		"huge":    func(p string) error { return os.WriteFile(p, append(make([]byte, 100), later...), 0o644) },
		"missing": func(string) error { return nil },
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(dir, name)
			if err := plant(p); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			ctx, cancel := withDeadline(context.Background(), start.Add(50*time.Millisecond), p)
			defer cancel()
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("the deadline was moved by a file that is not a regular host-written deadline")
			}
			if !errors.Is(context.Cause(ctx), bridgeapi.ErrDeadline) {
				t.Errorf("cause %v", context.Cause(ctx))
			}
		})
	}
}

func TestDeadlineWithoutFileIsPlain(t *testing.T) {
	ctx, cancel := withDeadline(context.Background(), time.Now().Add(20*time.Millisecond), "")
	defer cancel()
	<-ctx.Done()
	if !errors.Is(context.Cause(ctx), bridgeapi.ErrDeadline) {
		t.Errorf("cause %v", context.Cause(ctx))
	}
}
