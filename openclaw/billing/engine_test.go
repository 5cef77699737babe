package billing_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/internal/llmproxy/llmproxytest"
	"github.com/agentsandbox/sandbox/openclaw/billing"
)

// routerFront serves each run of the engine suite through its token path.
type routerFront struct {
	router *billing.Router
	srv    *httptest.Server
}

func (f *routerFront) StartRun(t testing.TB, s llmproxytest.RunSpec) llmproxytest.Run {
	reg, err := f.router.Register(billing.Run{RunID: s.RunID, Attempt: s.Attempt, Attribution: s.Attribution, Budget: s.Budget})
	if err != nil {
		t.Fatal(err)
	}
	return llmproxytest.Run{
		Client: f.srv.Client(), BaseURL: strings.TrimSuffix(reg.BaseURL(f.srv.URL), "/v1"),
		Audit: reg.Audit, Stop: reg.Stop,
	}
}

func TestEngineSuite(t *testing.T) {
	llmproxytest.Test(t, func(t testing.TB, cfg llmproxytest.Config) llmproxytest.Front {
		r, err := billing.NewRouter(cfg.Upstream, cfg.APIKey)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(r)
		t.Cleanup(srv.Close)
		return &routerFront{router: r, srv: srv}
	})
}
