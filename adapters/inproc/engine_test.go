package inproc

import (
	"testing"

	"github.com/agentsandbox/sandbox/internal/llmproxy/llmproxytest"
	"github.com/agentsandbox/sandbox/port"
)

func TestEngineSuite(t *testing.T) {
	llmproxytest.Test(t, func(t testing.TB, cfg llmproxytest.Config) llmproxytest.Front {
		m, _ := newManager(t)
		return &suiteFront{m: m, cfg: cfg}
	})
}

type suiteFront struct {
	m   *Manager
	cfg llmproxytest.Config
}

func (f *suiteFront) StartRun(t testing.TB, s llmproxytest.RunSpec) llmproxytest.Run {
	p := start(t, f.m, port.ProxySpec{
		RunID: s.RunID, Attempt: s.Attempt, Upstream: f.cfg.Upstream, APIKey: f.cfg.APIKey,
		Attribution: s.Attribution, Budget: s.Budget,
	})
	return llmproxytest.Run{Client: client(p), BaseURL: "http://sandbox", Audit: p.Audit, Stop: p.Stop}
}
