package gateway_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/agentsandbox/sandbox/openclaw/gateway"
	"github.com/agentsandbox/sandbox/openclaw/gateway/gatewaytest"
)

// Example runs one agent turn against the gateway double: dial with a token,
// start a run in its own session, stream its text, and wait for the answer.
func Example() {
	srv := gatewaytest.NewServer(gatewaytest.WithToken("example-token"))
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := gateway.Dial(ctx, srv.URL, gateway.WithToken("example-token"))
	if err != nil {
		fmt.Println("dial:", err)
		return
	}
	defer c.Close()

	run, err := c.Agent(ctx, gateway.AgentRequest{Message: "hello gateway", SessionKey: "billing-7:run-1"})
	if err != nil {
		fmt.Println("agent:", err)
		return
	}
	for u := range run.Updates(ctx) {
		if u.Kind == gateway.UpdateText {
			fmt.Printf("delta %q\n", u.Text)
		}
	}
	res, err := run.Wait(ctx)
	if err != nil {
		fmt.Println("wait:", err)
		return
	}
	fmt.Println(res.SessionKey, res.Status)
	fmt.Println(res.Text)
	// Output:
	// delta "hello "
	// delta "gateway "
	// agent:main:billing-7:run-1 ok
	// echo: hello gateway
}

// ExampleDial shows the options for a real gateway that may still be starting.
func ExampleDial() {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := gateway.Dial(ctx, "ws://127.0.0.1:1", // nothing listens here
		gateway.WithToken("token-from-config"),
		gateway.WithClientInfo("gateway-client", "myapp/1.0", "linux", "backend"),
		gateway.WithRetry(3, 10*time.Millisecond),
	)
	fmt.Println(err != nil)
	// Output: true
}

// ExampleWithDialContext reaches a gateway that listens on a unix socket: the
// dial function decides where the bytes go, the URL's host only names the
// gateway.
func ExampleWithDialContext() {
	dir, err := os.MkdirTemp("", "gw")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "gateway.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := gatewaytest.NewServer(gatewaytest.WithListener(ln), gatewaytest.WithToken("example-token"))
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := gateway.Dial(ctx, "ws://openclaw-gateway", gateway.WithToken("example-token"),
		gateway.WithDialContext(func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}))
	if err != nil {
		fmt.Println("dial:", err)
		return
	}
	defer c.Close()
	fmt.Println(c.Hello().Protocol)
	// Output: 4
}
