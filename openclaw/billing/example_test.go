package billing_test

import (
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/agentsandbox/sandbox/openclaw/billing"
	"github.com/agentsandbox/sandbox/port"
)

// A shared router in front of LiteLLM: each run gets a token, and the gateway's
// provider for that run points at the run's path.
func ExampleRouter() {
	router, err := billing.NewRouter("http://127.0.0.1:4000", "sk-litellm-master")
	if err != nil {
		panic(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() { _ = router.Serve(ln) }()
	defer router.Shutdown(context.Background())
	routerURL := "http://" + ln.Addr().String()

	reg, err := router.Register(billing.Run{
		RunID:       "run-42",
		Attribution: port.Attribution{BillingAccountID: "acct-7"},
		Budget:      port.Budget{MaxCalls: 50},
	})
	if err != nil {
		panic(err)
	}
	base := reg.BaseURL(routerURL) // give this to billing.Preparer.Prepare's provider
	fmt.Println(strings.HasPrefix(base, routerURL+"/r/"), strings.HasSuffix(base, "/v1"), len(reg.Token()) >= 43)

	audit, err := reg.Stop(context.Background()) // revokes the token; the audit is complete
	fmt.Println(len(audit), err, router.Stats().Registered)
	// Output:
	// true true true
	// 0 <nil> 0
}
