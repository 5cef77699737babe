package nomad

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/internal/testsupport/nomadtest"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/sandboxtest"
)

// RunnerPolicy is the least-privilege ACL policy the runner's token needs in the
// default namespace (see docs/nomad.md): jobs, their allocations' files and logs,
// signals, and the proxy variables under nomad/jobs/. No node, agent or operator
// rule.
const RunnerPolicy = `namespace "default" {
  capabilities = ["submit-job", "read-job", "list-jobs", "read-logs", "read-fs", "alloc-lifecycle"]
  variables {
    path "nomad/jobs/*" {
      capabilities = ["write", "read", "destroy", "list"]
    }
  }
}
`

// TestACLLeastPrivilege runs the proxy conformance suite (sidecar, variables, kill,
// cleanup) and a timed-out run on a cluster of its own with ACLs on, through a token
// of RunnerPolicy only, never a management token; and checks the token cannot read
// the nodes. About 60-95 s (its own cluster; the suite's cases in parallel).
func TestACLLeastPrivilege(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	c, err := nomadtest.Start(ctx, nomadtest.Options{ACL: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	token, err := c.Token("agentsandbox-runner", RunnerPolicy)
	if err != nil {
		t.Fatal(err)
	}
	owner := e.owner
	r, err := NewRunner(WithAddress(c.Addr), WithToken(token), WithOwner(owner), WithBridge(e.bridge), WithInit(e.init), WithProxyImage(e.proxy))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.api.Nodes().List(nil); err == nil || !strings.Contains(err.Error(), "Permission denied") {
		t.Errorf("the runner's token lists the nodes (%v): not least privilege", err)
	}
	ae := e
	ae.cluster = c
	left := ae.leftovers(r)
	res, err := r.RunOnce(ctx, port.RunSpec{RunID: sandboxtest.RunID("acl-timeout"), Image: e.image, Argv: []string{"/agent", "sleep", "60"}, Limits: port.Limits{Timeout: 2 * time.Second}})
	if res == nil || res.ErrorCode != port.CodeTimeout {
		t.Errorf("a timed-out run with the least-privilege token = %+v, %v", res, err)
	}
	t.Run("suite", func(t *testing.T) { // waits for the suite's parallel cases
		sandboxtest.TestProxyManager(t, sandboxtest.ProxyHarness{
			Manager: r, Runner: r, Image: e.image,
			KillEndsSandbox: true,
			Kill:            func(ctx context.Context, p port.Proxy) error { return p.(*Proxy).kill(ctx) },
			Leftovers: func(ctx context.Context, runID string) ([]string, error) {
				l, err := left(ctx, runID)
				r.mu.Lock()
				for tok, p := range r.proxies {
					if p.spec.RunID == runID {
						l = append(l, "proxy:"+tok)
					}
				}
				r.mu.Unlock()
				return l, err
			},
		})
	})
	if rep, err := r.Sweep(ctx, port.SweepOptions{}); err != nil || len(rep.Errors) > 0 {
		t.Errorf("Sweep with the least-privilege token: %+v, %v", rep, err)
	}
}
