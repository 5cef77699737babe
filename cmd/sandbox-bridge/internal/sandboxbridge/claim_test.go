package sandboxbridge

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
)

func TestClaimRoundTrip(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	c := bridgeapi.NewClaim([]string{"/agent", "a b", ""}, []string{"PATH=/bin", "X=1"}, "/workspace", true, time.Minute, now)
	b, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := bridgeapi.ReadClaim(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, c) {
		t.Fatalf("round trip: %+v, want %+v", got, c)
	}
	cfg := ClaimConfig(got)
	if cfg.NoForward || cfg.Dir != "/workspace" || !cfg.Deadline.Equal(now.Add(time.Minute+bridgeapi.DeadlineSlack)) || cfg.KillGrace != bridgeapi.DeadlineGrace {
		t.Errorf("config %+v", cfg)
	}
	if p, ok := got.Path(); !ok || p != "/bin" {
		t.Errorf("Path = %q, %v", p, ok)
	}
	if cfg := ClaimConfig(bridgeapi.NewClaim([]string{"x"}, nil, "", false, 0, now)); !cfg.NoForward || !cfg.Deadline.IsZero() || cfg.Env == nil {
		t.Errorf("no forward, no deadline, empty env: %+v", cfg)
	}
}

func TestReadClaimRefuses(t *testing.T) {
	for name, in := range map[string]string{
		"empty":      "",
		"not json":   "argv\n",
		"no command": `{"argv":[]}` + "\n",
		"too long":   `{"argv":["` + strings.Repeat("a", bridgeapi.MaxClaimBytes) + `"]}`,
	} {
		if _, err := bridgeapi.ReadClaim(strings.NewReader(in)); !errors.Is(err, bridgeapi.ErrBadClaim) {
			t.Errorf("%s: err = %v, want bridgeapi.ErrBadClaim", name, err)
		}
	}
}

func TestReadClaimTakesOneLine(t *testing.T) {
	c, err := bridgeapi.ReadClaim(strings.NewReader(`{"argv":["x"]}` + "\n" + `{"argv":["y"]}` + "\n"))
	if err != nil || len(c.Argv) != 1 || c.Argv[0] != "x" {
		t.Errorf("bridgeapi.ReadClaim = %+v, %v; want the first line's claim", c, err)
	}
}
