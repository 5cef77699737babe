package proxypolicy

import (
	"net/http"
	"testing"
)

func TestRouteFor(t *testing.T) {
	for _, c := range []struct {
		method, path, up string
		ok, other        bool
	}{
		{"POST", "/v1/chat/completions", "/v1/chat/completions", true, false},
		{"POST", "/chat/completions", "/v1/chat/completions", true, false},
		{"POST", "/v1/messages", "/v1/messages", true, false},
		{"GET", "/v1/models/anthropic/claude", "/v1/models/anthropic/claude", true, false},
		{"HEAD", "/v1/models", "/v1/models", true, false},
		{"GET", "/v1/chat/completions", "", false, true},
		{"DELETE", "/v1/models/x", "", false, true},
		{"POST", "/v1/files", "", false, false},
		{"GET", "/v1/model/info", "", false, false},
		{"POST", "/v1/mcp/server", "", false, false},
		{"GET", "/v1/modelsX", "", false, false},
		{"POST", "/v1/chat/completions/x", "", false, false},
	} {
		_, up, ok, other := RouteFor(c.method, c.path)
		if up != c.up || ok != c.ok || other != c.other {
			t.Errorf("RouteFor(%s %s) = %q %v %v", c.method, c.path, up, ok, other)
		}
	}
}

func TestRoutesAreACopy(t *testing.T) {
	rs := Routes()
	rs[0].BodyKeys[0] = "api_base"
	if Routes()[0].BodyKeys[0] == "api_base" {
		t.Fatal("Routes shares its slices with the table")
	}
	for _, r := range Routes() {
		if r.Method == http.MethodPost && len(r.BodyKeys) == 0 {
			t.Errorf("%s has no body allowlist", r.Path)
		}
	}
}
