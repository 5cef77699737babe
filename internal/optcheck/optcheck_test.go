package optcheck

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/errdefs"
)

// TestRefusedKeepsAndWraps: a refused value leaves the destination as it was and
// wraps errdefs.ErrInvalidSpec with the option's wording.
func TestRefusedKeepsAndWraps(t *testing.T) {
	dur, n, dir, limit := time.Second, 3, "/keep", int64(7)
	var rt http.RoundTripper = http.DefaultTransport
	for name, tc := range map[string]struct {
		err  error
		want string
	}{
		"positive": {Positive(&dur, 0, "cleanup timeout"), "cleanup timeout 0s is not positive"},
		"count":    {Count(&n, -1, "cleanup concurrency"), "cleanup concurrency -1 is negative"},
		"absdir":   {AbsDir(&dir, "rel", "pool directory"), `pool directory "rel" is not absolute`},
		"notnil":   {NotNil(&rt, nil, "nil transport"), "nil transport"},
		"logger":   {Logger(new(*slog.Logger), nil), "logger is nil"},
		"set":      {Set(&limit, -1, false, "read limit %d must be positive", -1), "read limit -1 must be positive"},
	} {
		if !errors.Is(tc.err, errdefs.ErrInvalidSpec) || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalidSpec with %q", name, tc.err, tc.want)
		}
	}
	if dur != time.Second || n != 3 || dir != "/keep" || rt != http.DefaultTransport || limit != 7 {
		t.Errorf("a refused value was stored: %v %d %q %v %d", dur, n, dir, rt, limit)
	}
}

func TestAcceptedStored(t *testing.T) {
	dur, n, dir, limit := time.Second, 3, "", int64(0)
	l := slog.New(slog.NewTextHandler(io.Discard, nil))
	var got *slog.Logger
	if Positive(&dur, 2*time.Second, "x") != nil || Count(&n, 0, "x") != nil || AbsDir(&dir, "/a/../b", "x") != nil ||
		Logger(&got, l) != nil || Set(&limit, 5, true, "unused") != nil {
		t.Fatal("a valid value was refused")
	}
	if dur != 2*time.Second || n != 0 || dir != "/b" || got != l || limit != 5 {
		t.Errorf("stored %v %d %q %v %d", dur, n, dir, got, limit)
	}
}
