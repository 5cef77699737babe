package runner

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

func TestResourceLabels(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	l := ResourceLabels("own", "r1", port.KindProxy, map[string]string{"team": "a"}, now)
	want := map[string]string{"team": "a", port.LabelOwner: "own", port.LabelRunID: "r1", port.LabelKind: port.KindProxy, port.LabelCreatedAt: "2026-01-02T02:04:05Z"}
	if len(l) != len(want) {
		t.Fatalf("labels = %v", l)
	}
	for k, v := range want {
		if l[k] != v {
			t.Errorf("%s = %q, want %q", k, l[k], v)
		}
	}
}

func TestValidateOwner(t *testing.T) {
	if err := ValidateOwner("host-1"); err != nil {
		t.Error(err)
	}
	err := ValidateOwner("has space")
	if !errors.Is(err, port.ErrInvalidSpec) || !strings.Contains(err.Error(), `owner "has space"`) || strings.Contains(err.Error(), "run id") {
		t.Errorf("err = %v, want ErrInvalidSpec naming the owner, not a run id", err)
	}
}

func TestValidateBridge(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "bridge")
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(exe, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(plain, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ValidateBridge(exe); err != nil {
		t.Errorf("%s: %v", exe, err)
	}
	for _, bad := range []string{"bridge", plain, dir, filepath.Join(dir, "missing")} {
		if err := ValidateBridge(bad); !errors.Is(err, port.ErrInvalidSpec) {
			t.Errorf("%s: err = %v, want ErrInvalidSpec", bad, err)
		}
	}
}
