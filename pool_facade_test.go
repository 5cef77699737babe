package sandbox

import (
	"context"
	"testing"

	"github.com/agentsandbox/sandbox/port"
)

// fakePool is a port.Pool serving one template, recording what it ran.
type fakePool struct {
	fakeRunner
	tmpl port.PoolTemplate
}

func (p *fakePool) Template() port.PoolTemplate { return p.tmpl }
func (p *fakePool) Stats() port.PoolStats       { return port.PoolStats{} }
func (p *fakePool) Close(context.Context) error { return nil }

// TestRunUsesMatchingPool: a run whose shape (Preload included) is a pool's template
// goes to that pool, which says how it started; other runs go to the runner.
func TestRunUsesMatchingPool(t *testing.T) {
	r := &fakeRunner{res: &port.RunResult{Start: port.StartCold}}
	req := request(t)
	req.Preload = &port.Preload{Argv: []string{"node", "/opt/preload.mjs"}}
	spec := port.RunSpec{RunID: req.RunID, Image: req.Image, WorkspaceDir: req.WorkspaceDir, Preload: req.Preload, Env: map[string]string{DefaultModelEnv: req.Model}}
	pool := &fakePool{fakeRunner: fakeRunner{res: &port.RunResult{Start: port.StartPreloaded}}, tmpl: port.TemplateOf(spec)}
	other := &fakePool{fakeRunner: fakeRunner{res: &port.RunResult{}}, tmpl: port.TemplateOf(port.RunSpec{Image: "other"})}
	s, err := New(r, WithPool(other), WithPool(pool))
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Run.Start != port.StartPreloaded || pool.got.RunID != req.RunID || pool.got.Preload == nil || other.got.RunID != "" || r.got.RunID != "" {
		t.Fatalf("the run did not go to the matching pool: %+v", res.Run)
	}
	req.Preload = nil
	req.RunID = "run-2"
	if res, err = s.Run(context.Background(), req); err != nil || res.Run.Start != port.StartCold || r.got.RunID != "run-2" {
		t.Fatalf("a run of no pool's shape: %v %+v", err, res.Run)
	}
	if _, err := New(r, WithPool(nil)); err == nil {
		t.Error("WithPool(nil) accepted")
	}
}
