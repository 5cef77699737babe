package adapterutil

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// TestSetters: a refused value leaves the destination as it was and wraps
// port.ErrInvalidSpec with the adapters' wording; an accepted one is stored.
func TestSetters(t *testing.T) {
	owner, dur, n, dir := "keep", time.Second, 3, "/keep"
	var rt http.RoundTripper = http.DefaultTransport
	for name, tc := range map[string]struct {
		err  error
		want string
	}{
		"owner":    {SetOwner(&owner, "bad owner"), `owner "bad owner" has characters`},
		"positive": {SetPositive(&dur, 0, "cleanup timeout"), "cleanup timeout 0s is not positive"},
		"count":    {SetCount(&n, -1, "cleanup concurrency"), "cleanup concurrency -1 is negative"},
		"absdir":   {SetAbsDir(&dir, "rel", "pool directory"), `pool directory "rel" is not absolute`},
		"notnil":   {SetNotNil(&rt, nil, "nil transport"), "nil transport"},
		"logger":   {SetLogger(new(*slog.Logger), nil), "logger is nil"},
	} {
		if !errors.Is(tc.err, port.ErrInvalidSpec) || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalidSpec with %q", name, tc.err, tc.want)
		}
	}
	if owner != "keep" || dur != time.Second || n != 3 || dir != "/keep" || rt != http.DefaultTransport {
		t.Errorf("a refused value was stored: %q %v %d %q %v", owner, dur, n, dir, rt)
	}
	l := slog.New(slog.NewTextHandler(io.Discard, nil))
	var got *slog.Logger
	if SetOwner(&owner, "o-1") != nil || SetPositive(&dur, 2*time.Second, "x") != nil || SetCount(&n, 0, "x") != nil ||
		SetAbsDir(&dir, "/a/../b", "x") != nil || SetLogger(&got, l) != nil {
		t.Fatal("a valid value was refused")
	}
	if owner != "o-1" || dur != 2*time.Second || n != 0 || dir != "/b" || got != l {
		t.Errorf("stored %q %v %d %q %v", owner, dur, n, dir, got)
	}
}
