package docker

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// One Option type serves both constructors: the shared options fit both, and an
// option of one constructor given to the other is refused with ErrInvalidSpec
// naming it (not ignored).
func TestOptionsOfTheOtherConstructorAreRefused(t *testing.T) {
	for name, o := range map[string]Option{
		"WithHost": WithHost("unix:///x"), "WithOwner": WithOwner("o"),
		"WithLogger": WithLogger(slog.Default()), "WithCleanupTimeout": WithCleanupTimeout(time.Second),
	} {
		if r, err := NewRunner(o); err != nil {
			t.Errorf("NewRunner(%s): %v", name, err)
		} else {
			r.Close()
		}
		if m, err := NewProxyManager(o); err != nil {
			t.Errorf("NewProxyManager(%s): %v", name, err)
		} else {
			m.Close()
		}
	}
	for name, o := range map[string]Option{
		"WithBridge": WithBridge("/b"), "WithRuntime": WithRuntime("runc"), "WithPoolDir": WithPoolDir("/p"),
		"WithCleanupConcurrency": WithCleanupConcurrency(1), "WithPullPolicy": WithPullPolicy(port.PullNever),
		"WithRegistryCredentials": WithRegistryCredentials(nil), "WithSessionDir": WithSessionDir("/s"),
		"WithMeterProvider": WithMeterProvider(nil),
	} {
		_, err := NewProxyManager(o)
		if !errors.Is(err, port.ErrInvalidSpec) || !strings.Contains(err.Error(), "docker."+name+" is an option of NewRunner, not of NewProxyManager") {
			t.Errorf("NewProxyManager(%s): %v, want ErrInvalidSpec naming it", name, err)
		}
	}
	for name, o := range map[string]Option{
		"WithProxyImage": WithProxyImage("i"), "WithProxyNetwork": WithProxyNetwork("n"),
		"WithProxyBaseDir": WithProxyBaseDir("/d"), "WithReadyTimeout": WithReadyTimeout(time.Second),
		"WithProxyBridge": WithProxyBridge("/b"), "WithMaxAuditRecords": WithMaxAuditRecords(1),
		"WithUnfilteredBodies": WithUnfilteredBodies(),
	} {
		_, err := NewRunner(o)
		if !errors.Is(err, port.ErrInvalidSpec) || !strings.Contains(err.Error(), "docker."+name+" is an option of NewProxyManager, not of NewRunner") {
			t.Errorf("NewRunner(%s): %v, want ErrInvalidSpec naming it", name, err)
		}
	}
}
