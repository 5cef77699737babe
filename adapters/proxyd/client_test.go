package proxyd_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/agentsandbox/sandbox/adapters/proxyd"
	"github.com/agentsandbox/sandbox/port"
)

func TestClientErrors(t *testing.T) {
	if _, err := proxyd.NewClient("relative.sock"); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("relative path: %v", err)
	}
	c, err := proxyd.NewClient(filepath.Join(t.TempDir(), "absent.sock"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Health(context.Background()); !errors.Is(err, port.ErrUnavailable) {
		t.Errorf("no daemon: %v, want ErrUnavailable", err)
	}
	m, _ := proxyd.NewManager(c)
	_, err = m.Start(context.Background(), port.ProxySpec{RunID: "r"})
	var oe *port.OpError
	if !errors.As(err, &oe) || oe.RunID != "r" || !errors.Is(err, port.ErrUnavailable) {
		t.Errorf("Start without a daemon: %v", err)
	}
	if _, err := proxyd.NewManager(nil); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("nil client: %v", err)
	}
	if _, err := proxyd.NewManager(c, proxyd.WithRateLimit(proxyd.RateLimit{RPS: -1})); !errors.Is(err, port.ErrInvalidSpec) {
		t.Errorf("negative rate: %v", err)
	}
}
