package nginxconf_test

import (
	"net/http"
	"testing"

	"github.com/agentsandbox/sandbox/adapters/docker/internal/nginxconf"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/proxypolicy"
)

// The Go fronts and the nginx template forward the same client headers, and none
// of them is a credential or attribution header.
func TestAllowedRequestHeadersMatchNginx(t *testing.T) {
	nginx := map[string]bool{}
	for _, n := range nginxconf.ForwardedRequestHeaders() {
		nginx[http.CanonicalHeaderKey(n)] = true
	}
	for _, n := range proxypolicy.AllowedRequestHeaders() {
		if !nginx[n] || !proxypolicy.IsAllowedRequestHeader(n) || proxypolicy.IsStripped(n) {
			t.Errorf("%s: nginx %v, allowed %v, stripped %v", n, nginx[n], proxypolicy.IsAllowedRequestHeader(n), proxypolicy.IsStripped(n))
		}
		delete(nginx, n)
	}
	if len(nginx) != 0 {
		t.Errorf("nginx forwards more: %v", nginx)
	}
}

// Every header the fake LiteLLM sends about the shared key is one nginx hides by
// name (it cannot keep only the allowlist), and none of the names it hides is one
// the Go fronts forward.
func TestHiddenResponseHeadersCoverSharedKey(t *testing.T) {
	hidden := map[string]bool{}
	for _, n := range nginxconf.HiddenResponseHeaders() {
		if proxypolicy.IsResponseHeaderAllowed(n) {
			t.Errorf("nginx hides %s, which the allowlist forwards", n)
		}
		hidden[http.CanonicalHeaderKey(n)] = true
	}
	for n := range litellmtest.SharedKeyHeaders {
		if !hidden[http.CanonicalHeaderKey(n)] {
			t.Errorf("nginx forwards %s", n)
		}
	}
}
