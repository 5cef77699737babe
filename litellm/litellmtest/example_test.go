package litellmtest_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/agentsandbox/sandbox/litellm/litellmtest"
)

// A test double for LiteLLM: call it, then assert on what it saw and billed.
func ExampleNewServer() {
	s := litellmtest.NewServer(litellmtest.WithReply(func(req litellmtest.ChatRequest) litellmtest.Reply {
		return litellmtest.Reply{Content: "hi " + req.EndUser}
	}))
	defer s.Close()

	req, _ := http.NewRequest("POST", s.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello"}],"user":"body-user"}`))
	req.Header.Set("Authorization", "Bearer "+s.MasterKey())
	req.Header.Set("x-litellm-end-user-id", "acct-1") // beats the body's user
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()

	fmt.Println(resp.StatusCode, strings.Contains(string(body), `"content":"hi acct-1"`))
	row := s.SpendRows()[0]
	fmt.Println(row.EndUser, row.LitellmCallID == resp.Header.Get("x-litellm-call-id"), len(s.Requests()))
	// Output:
	// 200 true
	// acct-1 true 1
}
