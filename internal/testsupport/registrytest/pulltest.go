package registrytest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/agentimage"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// PullRunner is a runner that pulls.
type PullRunner interface {
	port.SandboxRunner
	port.ImagePuller
}

// PullHarness is what TestPuller needs from an adapter.
type PullHarness struct {
	// New returns a runner pulling with policy and creds (nil: anonymous).
	New func(t *testing.T, policy port.PullPolicy, creds port.RegistryCredentials) PullRunner
	// Remove deletes an image reference from the engine's store (NotFound is success).
	Remove func(ctx context.Context, ref string) error
}

// pushFixtures pushes the probe image as team/agent:v1 and other content as
// team/agent:v2 (for the digest mismatch), and returns their digests.
func pushFixtures(ctx context.Context, t *testing.T, reg *Registry) (d1, d2 string) {
	t.Helper()
	probe, err := sandboxtest.ProbeAgentImage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d1, err = reg.Push(ctx, "team/agent", "v1", probe); err != nil {
		t.Fatal(err)
	}
	other := agentimage.Image{Name: "team/other", Files: []agentimage.File{{Path: "/hello", Mode: 0o644, Data: []byte("other")}}}
	if d2, err = reg.Push(ctx, "team/agent", "v2", other); err != nil {
		t.Fatal(err)
	}
	if d1 == d2 {
		t.Fatal("the two images have the same digest")
	}
	return d1, d2
}

// wantPullError fails t unless err is a *port.PullError from reg wrapping sentinel,
// with no password in its text.
func wantPullError(t *testing.T, reg *Registry, err, sentinel error) {
	t.Helper()
	var pe *port.PullError
	if !errors.Is(err, sentinel) || !errors.As(err, &pe) || pe.Registry != reg.Addr {
		t.Fatalf("got %v, want a *port.PullError from %s wrapping %v", err, reg.Addr, sentinel)
	}
	t.Logf("%v", err)
	if strings.Contains(err.Error(), reg.Password) {
		t.Fatalf("the error carries the password: %v", err)
	}
}

// TestPuller runs an adapter's pulls against a real registry with authentication:
// the pull policies, digest pinning, and a wrong password, a missing tag and a digest
// mismatch, each a typed error. It takes a few seconds.
func TestPuller(t *testing.T, h PullHarness) {
	t.Helper()
	reg := Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d1, d2 := pushFixtures(ctx, t, reg)
	good := port.StaticRegistryCredentials{reg.Addr: {Username: reg.User, Password: reg.Password}}
	bad := port.StaticRegistryCredentials{reg.Addr: {Username: reg.User, Password: "wrong-" + reg.Password}}
	tagged, pinned := reg.Ref("team/agent", "v1"), reg.Addr+"/team/agent@"+d1
	t.Cleanup(func() {
		for _, ref := range []string{tagged, pinned, reg.Ref("team/agent", "v2"), reg.Addr + "/team/agent@" + d2} {
			_ = h.Remove(context.Background(), ref)
		}
	})

	wantPullErr := func(t *testing.T, err, sentinel error) {
		t.Helper()
		wantPullError(t, reg, err, sentinel)
	}

	t.Run("NeverRefusesAbsent", func(t *testing.T) {
		r := h.New(t, port.PullNever, good)
		_, err := r.PullImage(ctx, pinned, port.PullNever)
		wantPullErr(t, err, port.ErrNotFound)
		// And a run with that policy never reaches the registry.
		_, err = r.RunOnce(ctx, port.RunSpec{RunID: sandboxtest.RunID("never"), Image: pinned, Argv: []string{"/agent", "echo", "x"}})
		if !errors.Is(err, port.ErrNotFound) {
			t.Fatalf("run with an absent image and PullNever: %v", err)
		}
	})
	t.Run("WrongPassword", func(t *testing.T) {
		_, err := h.New(t, port.PullIfNotPresent, bad).PullImage(ctx, tagged, port.PullIfNotPresent)
		wantPullErr(t, err, port.ErrPermissionDenied)
	})
	t.Run("Anonymous", func(t *testing.T) {
		_, err := h.New(t, port.PullIfNotPresent, nil).PullImage(ctx, tagged, port.PullIfNotPresent)
		wantPullErr(t, err, port.ErrPermissionDenied)
	})
	t.Run("MissingTag", func(t *testing.T) {
		_, err := h.New(t, port.PullIfNotPresent, good).PullImage(ctx, reg.Ref("team/agent", "v9"), port.PullIfNotPresent)
		wantPullErr(t, err, port.ErrNotFound)
	})
	t.Run("DigestMismatch", func(t *testing.T) {
		// v1 names d1, not d2: the tag and the pin disagree.
		_, err := h.New(t, port.PullIfNotPresent, good).PullImage(ctx, tagged+"@"+d2, port.PullIfNotPresent)
		wantPullErr(t, err, port.ErrDigestMismatch)
	})
	t.Run("BadPolicy", func(t *testing.T) {
		_, err := h.New(t, port.PullNever, good).PullImage(ctx, tagged, "Sometimes")
		if !errors.Is(err, port.ErrInvalidSpec) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("PolicyAndPinnedRun", func(t *testing.T) {
		testPolicyAndPinnedRun(ctx, t, h, reg, good, tagged, d1)
	})
	t.Run("AlwaysAsksTheRegistry", func(t *testing.T) {
		// The image is held (pulled with the right password): PullAlways still asks
		// the registry, so a wrong or revoked password fails, pinned or tagged, on
		// every runtime alike, and a run by policy does not start.
		if _, err := h.New(t, port.PullIfNotPresent, good).PullImage(ctx, pinned, port.PullIfNotPresent); err != nil {
			t.Fatal(err)
		}
		r := h.New(t, port.PullAlways, bad)
		for _, ref := range []string{pinned, tagged, tagged + "@" + d1} {
			_, err := r.PullImage(ctx, ref, port.PullAlways)
			wantPullErr(t, err, port.ErrPermissionDenied)
		}
		_, err := r.RunOnce(ctx, port.RunSpec{RunID: sandboxtest.RunID("revoked"), Image: pinned, Argv: []string{"/agent", "echo", "ran", ""}})
		wantPullErr(t, err, port.ErrPermissionDenied)
	})
	t.Run("RunPullsByPolicy", func(t *testing.T) {
		// A runner with IfNotPresent pulls a tag it does not hold on its first run.
		_ = h.Remove(ctx, tagged)
		r := h.New(t, port.PullIfNotPresent, good)
		res, err := r.RunOnce(ctx, port.RunSpec{RunID: sandboxtest.RunID("bypolicy"), Image: tagged, Argv: []string{"/agent", "echo", "pulled-by-policy", ""}})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(res.Stdout), "pulled-by-policy") {
			t.Fatalf("stdout %q", res.Stdout)
		}
	})
}

// testPolicyAndPinnedRun pulls a pinned reference under each policy, then runs it:
// the sandbox sees none of the credentials.
func testPolicyAndPinnedRun(ctx context.Context, t *testing.T, h PullHarness, reg *Registry, good port.StaticRegistryCredentials, tagged, d1 string) {
	pinned := reg.Addr + "/team/agent@" + d1
	r := h.New(t, port.PullIfNotPresent, good)
	p, err := r.PullImage(ctx, tagged+"@"+d1, port.PullIfNotPresent)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Pulled || p.Digest != d1 {
		t.Fatalf("first pull: %+v, want pulled at %s", p, d1)
	}
	if p, err = r.PullImage(ctx, pinned, port.PullIfNotPresent); err != nil || p.Pulled || p.Digest != d1 {
		t.Fatalf("IfNotPresent on a present image: %+v %v", p, err)
	}
	if p, err = r.PullImage(ctx, pinned, port.PullAlways); err != nil || !p.Pulled || p.Digest != d1 {
		t.Fatalf("Always: %+v %v", p, err)
	}
	// A run by the pinned reference; the sandbox sees none of the credentials.
	res, err := r.RunOnce(ctx, port.RunSpec{RunID: sandboxtest.RunID("pulled"), Image: pinned, Argv: []string{"/agent", "env"}})
	if err != nil {
		t.Fatal(err)
	}
	out := string(res.Stdout) + string(res.Stderr)
	if res.ExitCode != 0 || !strings.Contains(out, "PATH=") {
		t.Fatalf("run of the pulled image: exit %d, %q", res.ExitCode, out)
	}
	if strings.Contains(out, reg.Password) || strings.Contains(out, reg.User) {
		t.Fatalf("the registry credentials reached the sandbox: %q", out)
	}
}
