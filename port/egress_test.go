package port

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestEgressPolicyValidate(t *testing.T) {
	creds := CredentialFunc(func(context.Context, string, string, string) (string, error) { return "", nil })
	ok := &EgressPolicy{Credentials: creds, Providers: []EgressProvider{{ID: "gh", URIs: []string{"https://api.github.com/"}, Credentials: []string{"token"}}}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	var none *EgressPolicy
	if err := none.Validate(); err != nil {
		t.Fatalf("nil policy: %v", err)
	}
	for name, p := range map[string]*EgressPolicy{
		"no providers":   {},
		"bad id":         {Providers: []EgressProvider{{ID: "a/b", URIs: []string{"https://a/"}}}},
		"no uris":        {Providers: []EgressProvider{{ID: "a"}}},
		"dup":            {Providers: []EgressProvider{{ID: "a", URIs: []string{"https://a/"}}, {ID: "a", URIs: []string{"https://b/"}}}},
		"bad cred name":  {Credentials: creds, Providers: []EgressProvider{{ID: "a", URIs: []string{"https://a/"}, Credentials: []string{"{{x}}"}}}},
		"creds, no src":  {Providers: []EgressProvider{{ID: "a", URIs: []string{"https://a/"}, Credentials: []string{"x"}}}},
		"tunnel + creds": {Credentials: creds, Providers: []EgressProvider{{ID: "a", URIs: []string{"https://a/"}, Credentials: []string{"x"}, TunnelOnly: true}}},
		"negative":       {ResponseLimit: -1, Providers: []EgressProvider{{ID: "a", URIs: []string{"https://a/"}}}},
		"placement of an unlisted credential": {Credentials: creds, Providers: []EgressProvider{{ID: "a", URIs: []string{"https://a/"}, Credentials: []string{"x"},
			Placements: map[string]CredentialPlacement{"y": {Path: true}}}}},
		"placement header not a token": {Credentials: creds, Providers: []EgressProvider{{ID: "a", URIs: []string{"https://a/"}, Credentials: []string{"x"},
			Placements: map[string]CredentialPlacement{"x": {Headers: []string{"X Bad:"}}}}}},
	} {
		if err := p.Validate(); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestEgressEnv(t *testing.T) {
	env := EgressEnv()
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
		if env[k] != "http://"+EgressProxyAddr {
			t.Errorf("%s = %q", k, env[k])
		}
	}
	if env["NO_PROXY"] != "127.0.0.1,localhost" || env["no_proxy"] != env["NO_PROXY"] || env["NODE_USE_ENV_PROXY"] != "1" {
		t.Errorf("%v", env)
	}
	for _, k := range []string{"SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "GIT_SSL_CAINFO", "CURL_CA_BUNDLE"} {
		if env[k] != LLMSocketDir+"/"+EgressCAName {
			t.Errorf("%s = %q", k, env[k])
		}
	}
	d := &EgressDenial{Guard: GuardSSRF, Message: "internal"}
	if !strings.Contains(d.Error(), "ssrf") {
		t.Error(d.Error())
	}
}
