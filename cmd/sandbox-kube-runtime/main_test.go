package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLimitPIDsSetsTheAnnotatedLimitAndKeepsTheRest(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.json")
	in := `{"ociVersion":"1.0.2","annotations":{"dev.agentsandbox.pids-limit":"64"},"linux":{"resources":{"memory":{"limit":9223372036854775807}}},"process":{"rlimits":[{"type":"RLIMIT_NOFILE","hard":18446744073709551615,"soft":1024}]}}`
	if err := os.WriteFile(p, []byte(in), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := limitPIDs(p); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	for _, want := range []string{`"pids":{"limit":64}`, `9223372036854775807`, `18446744073709551615`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("config lacks %s: %s", want, b)
		}
	}
	// No annotation: untouched. A bad one: refused.
	if err := os.WriteFile(p, []byte(`{"annotations":{}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := limitPIDs(p); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != `{"annotations":{}}` {
		t.Errorf("rewritten without an annotation: %s", b)
	}
	if err := os.WriteFile(p, []byte(`{"annotations":{"dev.agentsandbox.pids-limit":"0"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := limitPIDs(p); err == nil {
		t.Error("a zero limit was accepted")
	}
}

func TestCreateBundle(t *testing.T) {
	if b, ok := createBundle(strings.Fields("--root /r --log /l create --bundle /b --pid-file /p id")); !ok || b != "/b" {
		t.Errorf("create: %q %v", b, ok)
	}
	if _, ok := createBundle(strings.Fields("--root /r start id")); ok {
		t.Error("start taken for create")
	}
}

func TestNetnsToEmpty(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.json")
	for in, want := range map[string]string{
		`{"annotations":{}}`: "",
		`{"annotations":{"dev.agentsandbox.netdown":"true"},"linux":{"namespaces":[{"type":"pid"},{"type":"network","path":"/run/netns/cni-1"}]}}`: "/run/netns/cni-1",
		`{"annotations":{"dev.agentsandbox.netdown":"true"},"linux":{"namespaces":[{"type":"network"}]}}`:                                          "",
		`{"annotations":{"dev.agentsandbox.netdown":"yes"},"linux":{"namespaces":[{"type":"network"}]}}`:                                           "error",
		`{"annotations":{"dev.agentsandbox.netdown":"true"},"linux":{"namespaces":[{"type":"pid"}]}}`:                                              "error",
	} {
		if err := os.WriteFile(p, []byte(in), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := netnsToEmpty(p)
		if err != nil {
			got = "error"
		}
		if got != want {
			t.Errorf("%s: %q (%v), want %q", in, got, err, want)
		}
	}
}
