package docker

import (
	"log/slog"
	"reflect"
	"testing"
	"time"
)

// Runner and ProxyManager options are separate types: an option for one given to the
// other does not compile, and only the shared ones fit both.
func TestOptionTypesDoNotMix(t *testing.T) {
	runnerT, proxyT := reflect.TypeFor[Option](), reflect.TypeFor[ProxyOption]()
	for name, o := range map[string]any{
		"WithHost": WithHost("unix:///x"), "WithClient": WithClient(nil), "WithOwner": WithOwner("o"),
		"WithLogger": WithLogger(slog.Default()), "WithCleanupTimeout": WithCleanupTimeout(time.Second),
	} {
		if ot := reflect.TypeOf(o); !ot.AssignableTo(runnerT) || !ot.AssignableTo(proxyT) {
			t.Errorf("%s does not fit both constructors", name)
		}
	}
	for name, o := range map[string]any{"WithBridge": WithBridge("/b")} {
		if reflect.TypeOf(o).AssignableTo(proxyT) {
			t.Errorf("runner option %s is accepted by NewProxyManager", name)
		}
	}
	for name, o := range map[string]any{
		"WithProxyImage": WithProxyImage("i"), "WithProxyNetwork": WithProxyNetwork("n"),
		"WithProxyBaseDir": WithProxyBaseDir("/d"), "WithReadyTimeout": WithReadyTimeout(time.Second),
		"WithProxyBridge": WithProxyBridge("/b"),
	} {
		if reflect.TypeOf(o).AssignableTo(runnerT) {
			t.Errorf("proxy option %s is accepted by NewRunner", name)
		}
	}
}
