package inprocproxy

import (
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/internal/llmproxy"
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

// TestAuditStatsReportsWhatTheCapsDropped: the calls past the audit caps are
// counted where the host can read them.
func TestAuditStatsReportsWhatTheCapsDropped(t *testing.T) {
	up := newUpstream(t)
	m, _ := newManager(t)
	up.setRoute(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
			return
		}
		_, _ = io.WriteString(w, completionBody)
	})
	p := start(t, m, testSpec("run-stats", up.URL))
	c := client(p)
	for range llmproxy.MaxUnbilledRecords + 5 {
		get(t, c, "/v1/models")
	}
	for range llmproxy.MaxRefusedRecords + 7 {
		get(t, c, "/v1/files")
	}
	post(t, c, "/v1/chat/completions", chatRequest, nil)
	recs, err := p.Stop(context.Background())
	require.NoError(t, err)
	st := p.AuditStats()
	assert.Equal(t, AuditStats{
		Records: len(recs), Forwarded: llmproxy.MaxUnbilledRecords + 6, Refused: llmproxy.MaxRefusedRecords + 7,
		RefusedDropped: 7, UnbilledDropped: 5, Tokens: 30,
	}, st)
	assert.Equal(t, llmproxy.MaxUnbilledRecords+llmproxy.MaxRefusedRecords+1, len(recs))
}
