package litellm_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/errdefs"
	"github.com/agentsandbox/sandbox/litellm"
	"github.com/agentsandbox/sandbox/litellm/litellmtest"
	"github.com/agentsandbox/sandbox/proxypolicy"
)

func call(t *testing.T, method, url, key, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestVirtualKey: the master key makes a virtual key limited to the proxy's routes,
// one model and a budget; the key reaches chat, nothing else, stops at its budget,
// cannot make keys, and stops working when deleted.
func TestVirtualKey(t *testing.T) {
	fake := litellmtest.NewServer()
	defer fake.Close()
	lc, err := litellm.New(litellm.WithBaseURL(fake.URL), litellm.WithMasterKey(fake.MasterKey()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	budget := 1e-9 // the first call spends more
	key, err := lc.GenerateKey(ctx, litellm.KeyRequest{
		KeyAlias: "sandbox-proxy", Duration: "1h", Models: []string{"gpt-4o-mini"},
		MaxBudget: &budget, AllowedRoutes: proxypolicy.KeyRoutes(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(key.Key, "sk-") || key.Token != litellmtest.HashKey(key.Key) || key.Expires.IsZero() ||
		len(key.AllowedRoutes) != len(proxypolicy.KeyRoutes()) || key.MaxBudget == nil || *key.MaxBudget != budget {
		t.Fatalf("key %+v", key)
	}
	if s := fmt.Sprintf("%v %+v %#v", key, key, key); strings.Contains(s, key.Key) {
		t.Fatalf("the key formats with its secret: %s", s)
	}
	chat := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`
	if code, body := call(t, "POST", fake.URL+"/v1/chat/completions", key.Key, chat); code != 200 {
		t.Fatalf("chat with the virtual key: %d %s", code, body)
	}
	// Outside its routes: LiteLLM's 403.
	if code, body := call(t, "GET", fake.URL+"/v1/model/info", key.Key, ""); code != 403 || !strings.Contains(body, "Virtual key is not allowed to call this route") {
		t.Errorf("model info with the virtual key: %d %s", code, body)
	}
	// Another model.
	if code, body := call(t, "POST", fake.URL+"/v1/chat/completions", key.Key, strings.Replace(chat, "gpt-4o-mini", "claude-haiku", 1)); code != 401 || !strings.Contains(body, "key_model_access_denied") {
		t.Errorf("other model: %d %s", code, body)
	}
	// Over budget after the first call.
	if code, body := call(t, "POST", fake.URL+"/v1/chat/completions", key.Key, chat); code != 400 || !strings.Contains(body, `"budget_exceeded"`) {
		t.Errorf("over budget: %d %s", code, body)
	}
	if vk := fake.VirtualKeys()[key.Token]; vk.Spend <= budget || vk.Alias != "sandbox-proxy" {
		t.Errorf("the fake's record: %+v", vk)
	}
	// The virtual key cannot make keys: it is no admin, and not allowed the route.
	vlc, err := litellm.New(litellm.WithBaseURL(fake.URL), litellm.WithMasterKey(key.Key))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := vlc.GenerateKey(ctx, litellm.KeyRequest{}); !errors.Is(err, litellm.ErrUnauthorized) {
		t.Errorf("a key from the virtual key: %v", err)
	}
	if err := lc.DeleteKeys(ctx, key.Key); err != nil {
		t.Fatal(err)
	}
	if code, _ := call(t, "POST", fake.URL+"/v1/chat/completions", key.Key, chat); code != 401 {
		t.Errorf("a deleted key: %d", code)
	}
	if err := lc.DeleteKeys(ctx, key.Key); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("deleting twice: %v", err)
	}
}
