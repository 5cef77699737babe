package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/agentsandbox/sandbox/errdefs"
	"github.com/agentsandbox/sandbox/openclaw/gateway"
	"github.com/agentsandbox/sandbox/openclaw/gateway/gatewaytest"
)

const testToken = "s3cret-token"

// testCtx bounds every test so that a bug shows as a failure, never a hang.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newServer(t *testing.T, opts ...gatewaytest.Option) *gatewaytest.Server {
	t.Helper()
	srv := gatewaytest.NewServer(append([]gatewaytest.Option{gatewaytest.WithToken(testToken)}, opts...)...)
	t.Cleanup(srv.Close)
	return srv
}

func dial(t *testing.T, srv *gatewaytest.Server, opts ...gateway.Option) *gateway.Client {
	t.Helper()
	c, err := gateway.Dial(testCtx(t), srv.URL, append([]gateway.Option{gateway.WithToken(testToken)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestDialHandshake(t *testing.T) {
	srv := newServer(t, gatewaytest.WithTickInterval(15*time.Second, true), gatewaytest.WithMaxPayload(1<<20))
	c := dial(t, srv)

	h := c.Hello()
	assert.Equal(t, 4, h.Protocol)
	assert.Equal(t, "gatewaytest", h.Server.Version)
	assert.Equal(t, int64(15000), h.Policy.TickIntervalMs)
	assert.Equal(t, int64(1<<20), h.Policy.MaxPayload)
	assert.True(t, h.HasMethod("agent"))
	assert.False(t, h.HasMethod("nope"))
	assert.NoError(t, c.Err())

	conns := srv.Conns()
	require.Len(t, conns, 1)
	cp := conns[0].Connect
	assert.Equal(t, h.Server.ConnID, conns[0].ID)
	assert.Equal(t, 3, cp.MinProtocol)
	assert.Equal(t, 4, cp.MaxProtocol)
	assert.Equal(t, "gateway-client", cp.Client.ID)
	assert.Equal(t, "backend", cp.Client.Mode)
	assert.Equal(t, "operator", cp.Role)
	assert.Equal(t, []string{"operator.admin"}, cp.Scopes)
	assert.Equal(t, testToken, cp.Auth.Token)
}

func TestDialClientInfoAndRole(t *testing.T) {
	srv := newServer(t)
	dial(t, srv, gateway.WithClientInfo("cli", "9.9.9", "plan9", "cli"), gateway.WithRole("operator"),
		gateway.WithScopes("operator.read", "operator.write"))
	cp := srv.Conns()[0].Connect
	assert.Equal(t, "cli", cp.Client.ID)
	assert.Equal(t, "9.9.9", cp.Client.Version)
	assert.Equal(t, "plan9", cp.Client.Platform)
	assert.Equal(t, []string{"operator.read", "operator.write"}, cp.Scopes)
}

func TestDialWrongToken(t *testing.T) {
	for _, tc := range []struct {
		name, token, detail string
	}{
		{"mismatch", "wrong-token", gateway.DetailAuthTokenMismatch},
		{"missing", "", gateway.DetailAuthTokenMissing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t)
			var opts []gateway.Option
			if tc.token != "" {
				opts = append(opts, gateway.WithToken(tc.token))
			}
			c, err := gateway.Dial(testCtx(t), srv.URL, opts...)
			require.Error(t, err)
			assert.Nil(t, c)
			assert.ErrorIs(t, err, gateway.ErrAuth)
			assert.NotErrorIs(t, err, gateway.ErrProtocolMismatch)
			var ge *gateway.Error
			require.ErrorAs(t, err, &ge)
			assert.Equal(t, "connect", ge.Method)
			assert.Equal(t, gateway.CodeInvalidRequest, ge.Code)
			assert.Equal(t, tc.detail, ge.DetailCode)
			assert.Contains(t, ge.Message, "token mismatch")
			assert.Contains(t, err.Error(), tc.detail)
			assert.Equal(t, 1, srv.ConnectAttempts(), "an auth failure is not retried")
		})
	}
}

func TestDialProtocolMismatch(t *testing.T) {
	for _, v := range []int{2, 5} {
		t.Run(fmt.Sprint(v), func(t *testing.T) {
			srv := newServer(t, gatewaytest.WithProtocol(v))
			_, err := gateway.Dial(testCtx(t), srv.URL, gateway.WithToken(testToken))
			assert.ErrorIs(t, err, gateway.ErrProtocolMismatch)
			assert.NotErrorIs(t, err, gateway.ErrAuth)
			var ge *gateway.Error
			require.ErrorAs(t, err, &ge)
			assert.Equal(t, gateway.DetailProtocolMismatch, ge.DetailCode)
			assert.Contains(t, string(ge.Details), fmt.Sprintf(`"expectedProtocol":%d`, v))
		})
	}
}

func TestDialProtocol3Accepted(t *testing.T) {
	srv := newServer(t, gatewaytest.WithProtocol(3))
	c := dial(t, srv)
	assert.Equal(t, 3, c.Hello().Protocol)
}

func TestDialRetriesWhileGatewayStarts(t *testing.T) {
	srv := newServer(t, gatewaytest.WithUnavailable(2, 20*time.Millisecond))
	c := dial(t, srv, gateway.WithRetry(5, time.Millisecond))
	assert.Equal(t, 4, c.Hello().Protocol)
	assert.Equal(t, 3, srv.ConnectAttempts())
}

func TestDialGivesUpAfterRetries(t *testing.T) {
	srv := newServer(t, gatewaytest.WithUnavailable(5, 10*time.Millisecond))
	_, err := gateway.Dial(testCtx(t), srv.URL, gateway.WithToken(testToken), gateway.WithRetry(2, time.Millisecond))
	require.Error(t, err)
	assert.ErrorIs(t, err, errdefs.ErrUnavailable)
	var ge *gateway.Error
	require.ErrorAs(t, err, &ge)
	assert.Equal(t, gateway.CodeUnavailable, ge.Code)
	assert.True(t, ge.Retryable)
	assert.Equal(t, 10*time.Millisecond, ge.RetryAfter)
	assert.Equal(t, 2, srv.ConnectAttempts())
}

func TestDialRetryStopsWithContext(t *testing.T) {
	// retryAfterMs far beyond the context: Dial must return when ctx ends. The
	// context ends once the client has closed the refused connection, so Dial is
	// waiting to retry by then, however slow the machine.
	srv := newServer(t, gatewaytest.WithUnavailable(5, time.Hour))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dialTCP := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &onClose{Conn: conn, f: cancel}, nil
	}
	_, err := gateway.Dial(ctx, srv.URL, gateway.WithToken(testToken), gateway.WithRetry(10, time.Millisecond),
		gateway.WithDialContext(dialTCP))
	assert.ErrorIs(t, err, context.Canceled)
	assert.Contains(t, err.Error(), "gateway starting")
	assert.Equal(t, 1, srv.ConnectAttempts())
}

// onClose is a net.Conn that runs f once it is closed.
type onClose struct {
	net.Conn
	f    func()
	once sync.Once
}

func (c *onClose) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.f)
	return err
}

func TestDialRefusedIsUnavailable(t *testing.T) {
	hs := httptest.NewServer(http.NotFoundHandler())
	u := "ws" + strings.TrimPrefix(hs.URL, "http")
	hs.Close() // nothing listens there any more
	_, err := gateway.Dial(testCtx(t), u, gateway.WithRetry(2, time.Millisecond))
	assert.ErrorIs(t, err, errdefs.ErrUnavailable)
}

func TestDialHandshakeHonoursContext(t *testing.T) {
	// A server that upgrades but never sends connect.challenge.
	hold := make(chan struct{})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		<-hold
		_ = ws.Close()
	}))
	defer hs.Close()
	defer close(hold)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := gateway.Dial(ctx, "ws"+strings.TrimPrefix(hs.URL, "http"), gateway.WithRetry(1, 0))
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

// TestDialUnixSocket reaches a gateway that listens on a unix socket through a
// dial function: no gorilla type in sight, and the URL's host resolves nowhere,
// so only the dial function can have carried the run.
func TestDialUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "gw.sock")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	srv := newServer(t, gatewaytest.WithListener(ln))
	require.Equal(t, "ws://gatewaytest.invalid", srv.URL)
	var dialed atomic.Int32
	dialUnix := func(ctx context.Context, network, addr string) (net.Conn, error) {
		dialed.Add(1)
		assert.Equal(t, "gatewaytest.invalid:80", addr, "the dial function gets the URL's host")
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}
	c := dial(t, srv, gateway.WithDialContext(dialUnix))
	ctx := testCtx(t)
	run, err := c.Agent(ctx, gateway.AgentRequest{Message: "over a socket", SessionKey: "unix"})
	require.NoError(t, err)
	res, err := run.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, "echo: over a socket", res.Text)
	assert.Equal(t, int32(1), dialed.Load())
	require.Len(t, srv.Conns(), 1)
	assert.Equal(t, c.Hello().Server.ConnID, srv.Conns()[0].ID)
}

func TestDialContextFailureIsRetried(t *testing.T) {
	var attempts atomic.Int32
	_, err := gateway.Dial(testCtx(t), "ws://gateway.invalid",
		gateway.WithDialContext(func(context.Context, string, string) (net.Conn, error) {
			attempts.Add(1)
			return nil, errors.New("socket not there yet")
		}),
		gateway.WithRetry(3, time.Millisecond))
	assert.ErrorIs(t, err, errdefs.ErrUnavailable)
	assert.Contains(t, err.Error(), "socket not there yet")
	assert.Equal(t, int32(3), attempts.Load())
}

func TestDialRejectsBadInput(t *testing.T) {
	ctx := testCtx(t)
	for name, tc := range map[string]struct {
		url  string
		opts []gateway.Option
	}{
		"http scheme":      {"http://127.0.0.1:1", nil},
		"no host":          {"ws://", nil},
		"garbage":          {"::", nil},
		"token whitespace": {"ws://127.0.0.1:1", []gateway.Option{gateway.WithToken(" x")}},
		"empty token":      {"ws://127.0.0.1:1", []gateway.Option{gateway.WithToken("")}},
		"read limit":       {"ws://127.0.0.1:1", []gateway.Option{gateway.WithReadLimit(0)}},
		"retry":            {"ws://127.0.0.1:1", []gateway.Option{gateway.WithRetry(0, 0)}},
		"role":             {"ws://127.0.0.1:1", []gateway.Option{gateway.WithRole("")}},
		"scope":            {"ws://127.0.0.1:1", []gateway.Option{gateway.WithScopes("")}},
		"logger":           {"ws://127.0.0.1:1", []gateway.Option{gateway.WithLogger(nil)}},
		"dial func":        {"ws://127.0.0.1:1", []gateway.Option{gateway.WithDialContext(nil)}},
		"tls config":       {"ws://127.0.0.1:1", []gateway.Option{gateway.WithTLSConfig(nil)}},
		"liveness":         {"ws://127.0.0.1:1", []gateway.Option{gateway.WithLivenessTimeout(0)}},
		"write timeout":    {"ws://127.0.0.1:1", []gateway.Option{gateway.WithWriteTimeout(-1)}},
		"client info":      {"ws://127.0.0.1:1", []gateway.Option{gateway.WithClientInfo(" x", "", "", "")}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := gateway.Dial(ctx, tc.url, tc.opts...)
			assert.ErrorIs(t, err, errdefs.ErrInvalidSpec)
		})
	}
}

// TestRequestOutOfOrder answers three concurrent calls in reverse order; each
// caller must get its own answer.
func TestRequestOutOfOrder(t *testing.T) {
	srv := newServer(t, gatewaytest.WithHandler(func(c *gatewaytest.Conn) {
		var reqs []gatewaytest.Request
		for len(reqs) < 3 {
			r, err := c.Next(context.Background())
			if err != nil {
				return
			}
			reqs = append(reqs, r)
		}
		for i := len(reqs) - 1; i >= 0; i-- {
			var p struct{ N int }
			_ = reqs[i].Decode(&p)
			_ = c.Reply(reqs[i].ID, map[string]any{"method": reqs[i].Method, "n": p.N * 10, "extra": "ignored"})
		}
	}))
	c := dial(t, srv)
	ctx := testCtx(t)
	var wg sync.WaitGroup
	got := make([]string, 3)
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			raw, err := c.Request(ctx, fmt.Sprintf("m%d", i), map[string]int{"N": i})
			if err != nil {
				got[i] = err.Error()
				return
			}
			var p struct {
				Method string
				N      int
			}
			_ = json.Unmarshal(raw, &p)
			got[i] = fmt.Sprintf("%s=%d", p.Method, p.N)
		}()
	}
	wg.Wait()
	assert.Equal(t, []string{"m0=0", "m1=10", "m2=20"}, got)
}

func TestRequestGatewayError(t *testing.T) {
	srv := newServer(t, gatewaytest.WithHandler(func(c *gatewaytest.Conn) {
		r, err := c.Next(context.Background())
		if err != nil {
			return
		}
		_ = c.ReplyError(r.ID, gatewaytest.Error{
			Code: "UNAVAILABLE", Message: "The server is busy", Retryable: true, RetryAfterMs: 1500,
			Details: map[string]any{"code": "BUSY", "queue": 7},
		}, nil)
	}))
	c := dial(t, srv)
	_, err := c.Request(testCtx(t), "health", nil)
	var ge *gateway.Error
	require.ErrorAs(t, err, &ge)
	assert.Equal(t, "health", ge.Method)
	assert.Equal(t, "UNAVAILABLE", ge.Code)
	assert.Equal(t, "The server is busy", ge.Message)
	assert.Equal(t, "BUSY", ge.DetailCode)
	assert.JSONEq(t, `{"code":"BUSY","queue":7}`, string(ge.Details))
	assert.True(t, ge.Retryable)
	assert.Equal(t, 1500*time.Millisecond, ge.RetryAfter)
	assert.ErrorIs(t, err, errdefs.ErrUnavailable)
	assert.NoError(t, c.Err(), "a gateway error does not end the connection")
}

// replyThen returns a handler that waits for one request and then runs f.
func replyThen(f func(c *gatewaytest.Conn, r gatewaytest.Request)) gatewaytest.Option {
	return gatewaytest.WithHandler(func(c *gatewaytest.Conn) {
		r, err := c.Next(context.Background())
		if err != nil {
			return
		}
		f(c, r)
		<-c.Closed()
	})
}

func TestMalformedFrameEndsConnection(t *testing.T) {
	for name, frame := range map[string]string{
		"not json":     `{not json`,
		"no type":      `{"id":"x","ok":true}`,
		"res no id":    `{"type":"res","ok":true}`,
		"event noname": `{"type":"event","payload":{}}`,
		"wrong types":  `{"type":"res","id":7}`,
	} {
		t.Run(name, func(t *testing.T) {
			srv := newServer(t, replyThen(func(c *gatewaytest.Conn, _ gatewaytest.Request) {
				_ = c.Send([]byte(frame))
			}))
			c := dial(t, srv)
			_, err := c.Request(testCtx(t), "health", nil)
			assert.ErrorIs(t, err, gateway.ErrMalformedFrame)
			assert.ErrorIs(t, err, gateway.ErrClosed)
			assert.ErrorIs(t, c.Err(), gateway.ErrMalformedFrame)
		})
	}
}

func TestUnknownFramesAndResponsesIgnored(t *testing.T) {
	srv := newServer(t, replyThen(func(c *gatewaytest.Conn, r gatewaytest.Request) {
		_ = c.Send([]byte(`{"type":"future","x":1}`))
		_ = c.Reply("no-such-id", map[string]any{})
		_ = c.Event("presence", map[string]any{"whatever": true})
		_ = c.Event("chat", map[string]any{"runId": "nobody", "sessionKey": "agent:main:x", "state": "delta", "deltaText": "x"})
		_ = c.Event("chat", "not an object")
		_ = c.Reply(r.ID, map[string]any{"fine": true})
	}))
	c := dial(t, srv)
	raw, err := c.Request(testCtx(t), "health", nil)
	require.NoError(t, err)
	assert.JSONEq(t, `{"fine":true}`, string(raw))
}

func TestOversizedFrame(t *testing.T) {
	srv := newServer(t, replyThen(func(c *gatewaytest.Conn, r gatewaytest.Request) {
		_ = c.Reply(r.ID, map[string]any{"blob": strings.Repeat("x", 8192)})
	}))
	c := dial(t, srv, gateway.WithReadLimit(2048))
	_, err := c.Request(testCtx(t), "health", nil)
	assert.ErrorIs(t, err, gateway.ErrFrameTooLarge)
	assert.ErrorIs(t, err, gateway.ErrClosed)
}

func TestRequestOverMaxPayloadRefusedLocally(t *testing.T) {
	srv := newServer(t, gatewaytest.WithMaxPayload(4096), gatewaytest.WithHandler(gatewaytest.EchoAgent))
	c := dial(t, srv)
	ctx := testCtx(t)
	_, err := c.Request(ctx, "chat.abort", map[string]string{"sessionKey": strings.Repeat("k", 5000)})
	assert.ErrorIs(t, err, gateway.ErrFrameTooLarge)
	assert.NoError(t, c.Err(), "the connection survives a refused request")
	ok, err := c.Abort(ctx, "s1", "r1")
	require.NoError(t, err)
	assert.True(t, ok)
}

func TestLivenessTimeoutFailsPendingCalls(t *testing.T) {
	// Ticks every 30ms are promised but never sent, and the request is never
	// answered: after 2.5 intervals of silence the connection is dead.
	srv := newServer(t, gatewaytest.WithTickInterval(30*time.Millisecond, false),
		replyThen(func(*gatewaytest.Conn, gatewaytest.Request) {}))
	c := dial(t, srv)
	_, err := c.Request(testCtx(t), "health", nil)
	assert.ErrorIs(t, err, gateway.ErrClosed)
	assert.ErrorIs(t, err, gateway.ErrLivenessTimeout)
	<-c.Done()
	assert.ErrorIs(t, c.Err(), gateway.ErrLivenessTimeout)
}

func TestTicksKeepConnectionAlive(t *testing.T) {
	// The answer comes after 2.5 liveness windows (2.5 ticks each); ticks must
	// keep the connection up. A process that is not scheduled for a good part of
	// a window (a loaded machine) can lose the connection through no fault of the
	// client: such an attempt proves nothing and is repeated.
	const tick = 40 * time.Millisecond
	for attempt := 1; ; attempt++ {
		srv := newServer(t, gatewaytest.WithTickInterval(tick, true),
			replyThen(func(c *gatewaytest.Conn, r gatewaytest.Request) {
				time.Sleep(25 * tick / 4)
				_ = c.Reply(r.ID, map[string]any{"late": true})
			}))
		c := dial(t, srv)
		stop := stallWatch()
		raw, err := c.Request(testCtx(t), "health", nil)
		stalled := stop()
		if err == nil {
			assert.JSONEq(t, `{"late":true}`, string(raw))
			return
		}
		if stalled < 5*tick/4 || attempt == 20 {
			t.Fatalf("attempt %d: %v (longest scheduling gap %s)", attempt, err, stalled)
		}
		t.Logf("attempt %d inconclusive: the process was not scheduled for %s", attempt, stalled)
	}
}

// stallWatch measures how long this process went unscheduled: the longest gap
// between wake-ups of a goroutine that sleeps 5ms at a time, until stop.
func stallWatch() (stop func() time.Duration) {
	done := make(chan struct{})
	res := make(chan time.Duration, 1)
	go func() {
		var worst time.Duration
		last := time.Now()
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				res <- max(worst, time.Since(last))
				return
			case <-t.C:
				now := time.Now()
				worst = max(worst, now.Sub(last))
				last = now
			}
		}
	}()
	return func() time.Duration { close(done); return <-res }
}

func TestRequestContextCancel(t *testing.T) {
	srv := newServer(t, replyThen(func(*gatewaytest.Conn, gatewaytest.Request) {}))
	c := dial(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.Request(ctx, "health", nil)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.NoError(t, c.Err(), "a cancelled call leaves the connection open")
}

func TestCloseFailsPendingAndLaterCalls(t *testing.T) {
	got := make(chan struct{})
	srv := newServer(t, replyThen(func(*gatewaytest.Conn, gatewaytest.Request) { close(got) }))
	c := dial(t, srv)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Request(context.Background(), "health", nil)
		errc <- err
	}()
	<-got // the request is pending at the gateway
	require.NoError(t, c.Close())
	assert.ErrorIs(t, <-errc, gateway.ErrClosed)
	_, err := c.Request(testCtx(t), "health", nil)
	assert.ErrorIs(t, err, gateway.ErrClosed)
	require.NoError(t, c.Close(), "Close is idempotent")
}

func TestServerCloseFrameEndsConnection(t *testing.T) {
	srv := newServer(t, replyThen(func(c *gatewaytest.Conn, _ gatewaytest.Request) {
		c.Close(websocket.CloseGoingAway, "restart")
	}))
	c := dial(t, srv)
	_, err := c.Request(testCtx(t), "health", nil)
	assert.ErrorIs(t, err, gateway.ErrClosed)
	var ce *websocket.CloseError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, websocket.CloseGoingAway, ce.Code)
}

// TestNoGoroutineLeak runs a busy session and checks that every goroutine of
// client and double is gone afterwards.
func TestNoGoroutineLeak(t *testing.T) {
	// Every goroutine alive now (other tests' leftovers, the runtime's) is not this
	// test's; any other goroutine still running at the end is.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	func() {
		// Frequent ticks exercise the double's tick goroutines; the client's own
		// liveness timeout is long so that a loaded machine cannot end a run.
		srv := gatewaytest.NewServer(gatewaytest.WithToken(testToken), gatewaytest.WithTickInterval(10*time.Millisecond, true))
		defer srv.Close()
		ctx := testCtx(t)
		for range 3 {
			c, err := gateway.Dial(ctx, srv.URL, gateway.WithToken(testToken), gateway.WithLivenessTimeout(time.Minute))
			require.NoError(t, err)
			run, err := c.Agent(ctx, gateway.AgentRequest{Message: "a b c", SessionKey: "leak"})
			require.NoError(t, err)
			for range run.Updates(ctx) {
			}
			_, err = run.Wait(ctx)
			require.NoError(t, err)
			// A call left pending at Close.
			go func() { _, _ = c.Request(context.Background(), "unknown.method.slow", nil) }()
			require.NoError(t, c.Close())
		}
		// A connection the server drops.
		c, err := gateway.Dial(ctx, srv.URL, gateway.WithToken(testToken))
		require.NoError(t, err)
		srv.Close()
		<-c.Done()
		require.NoError(t, c.Close())
	}()
}

func TestErrorMessage(t *testing.T) {
	e := &gateway.Error{Method: "connect", Code: "INVALID_REQUEST", DetailCode: "AUTH_TOKEN_MISMATCH", Message: "unauthorized"}
	assert.Equal(t, "gateway connect: INVALID_REQUEST (AUTH_TOKEN_MISMATCH): unauthorized", e.Error())
	assert.True(t, errors.Is(e, gateway.ErrAuth))
	assert.False(t, errors.Is(e, errdefs.ErrUnavailable))
	assert.True(t, errors.Is(&gateway.Error{Code: "AGENT_TIMEOUT"}, errdefs.ErrTimeout))
	assert.True(t, errors.Is(&gateway.Error{Code: "NOT_PAIRED"}, gateway.ErrAuth))
}
