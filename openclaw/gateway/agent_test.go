package gateway_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/errdefs"
	"github.com/agentsandbox/sandbox/openclaw/gateway"
	"github.com/agentsandbox/sandbox/openclaw/gateway/gatewaytest"
)

// collect drains a run's updates into its text and all update contents.
func collect(ctx context.Context, run *gateway.AgentRun) (text string, all []string) {
	var b strings.Builder
	for u := range run.Updates(ctx) {
		switch u.Kind {
		case gateway.UpdateText:
			if u.Replace {
				b.Reset()
			}
			b.WriteString(u.Text)
			all = append(all, "text:"+u.Text)
		case gateway.UpdateState:
			all = append(all, "state:"+u.State+":"+u.ErrorMessage)
		case gateway.UpdateAgent:
			all = append(all, "agent:"+u.Stream+":"+string(u.Data))
		}
	}
	return b.String(), all
}

func TestAgentEcho(t *testing.T) {
	srv := newServer(t) // default handler: gatewaytest.EchoAgent
	c := dial(t, srv)
	ctx := testCtx(t)

	run, err := c.Agent(ctx, gateway.AgentRequest{Message: "hello brave world", SessionKey: "Run-42"})
	require.NoError(t, err)
	assert.Equal(t, "agent:main:run-42", run.SessionKey())
	assert.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, run.RunID())

	text, all := collect(ctx, run)
	assert.Equal(t, "hello brave world ", text)
	assert.Equal(t, "state:final:", all[len(all)-1])

	res, err := run.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, "ok", res.Status)
	assert.Equal(t, "completed", res.Summary)
	assert.Equal(t, "echo: hello brave world", res.Text)
	assert.Equal(t, []gateway.Payload{{Text: "echo: hello brave world"}}, res.Payloads)
	assert.Equal(t, "hello brave world ", res.StreamedText)
	assert.Equal(t, run.RunID(), res.RunID)
	assert.Equal(t, "agent:main:run-42", res.SessionKey)
	assert.JSONEq(t, `{"durationMs":12,"agentMeta":{"provider":"fake","model":"fake-model"}}`, string(res.Meta))
	assert.Zero(t, res.FilteredEvents)
}

func TestAgentSendsOnlySchemaFields(t *testing.T) {
	params := make(chan map[string]any, 1)
	srv := newServer(t, gatewaytest.WithHandler(func(c *gatewaytest.Conn) {
		r, err := c.Next(context.Background()) // the double refuses unknown keys itself
		if err != nil {
			return
		}
		var m map[string]any
		_ = r.Decode(&m)
		params <- m
		run, _ := c.Accept(r)
		_ = run.Finish("ok", "fine")
	}))
	c := dial(t, srv)
	ctx := testCtx(t)
	run, err := c.Agent(ctx, gateway.AgentRequest{
		Message: "do it", SessionKey: "s1", AgentID: "main", IdempotencyKey: "key-1",
		Model: "fake/fake-model", Timeout: 1500 * time.Millisecond, ExtraSystemPrompt: "be brief",
	})
	require.NoError(t, err)
	_, err = run.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]any{
		"message": "do it", "sessionKey": "s1", "agentId": "main", "idempotencyKey": "key-1",
		"model": "fake/fake-model", "timeout": float64(2), "extraSystemPrompt": "be brief",
	}, <-params)
	assert.Equal(t, "key-1", run.RunID())
}

func TestAgentRejectsBadRequests(t *testing.T) {
	c := dial(t, newServer(t))
	ctx := testCtx(t)
	for name, req := range map[string]gateway.AgentRequest{
		"no message":    {SessionKey: "s"},
		"blank message": {Message: "  ", SessionKey: "s"},
		"no session":    {Message: "hi"},
		"bad agent":     {Message: "hi", SessionKey: "s", AgentID: "no spaces"},
		"neg timeout":   {Message: "hi", SessionKey: "s", Timeout: -time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := c.Agent(ctx, req)
			assert.ErrorIs(t, err, errdefs.ErrInvalidSpec)
		})
	}
	// The same run id twice on one connection is refused.
	got := make(chan struct{})
	c2 := dial(t, newServer(t, replyThen(func(*gatewaytest.Conn, gatewaytest.Request) { close(got) })))
	go func() {
		_, _ = c2.Agent(ctx, gateway.AgentRequest{Message: "a", SessionKey: "s", IdempotencyKey: "dup"})
	}()
	<-got
	_, err := c2.Agent(ctx, gateway.AgentRequest{Message: "b", SessionKey: "s", IdempotencyKey: "dup"})
	assert.ErrorIs(t, err, errdefs.ErrInvalidSpec)
	assert.Contains(t, err.Error(), `"dup" is already running`)
}

func TestAgentRejectedByGateway(t *testing.T) {
	srv := newServer(t, replyThen(func(c *gatewaytest.Conn, r gatewaytest.Request) {
		_ = c.ReplyError(r.ID, gatewaytest.Error{Code: "INVALID_REQUEST", Message: "missing scope: operator.write"}, nil)
	}))
	c := dial(t, srv)
	run, err := c.Agent(testCtx(t), gateway.AgentRequest{Message: "hi", SessionKey: "s"})
	assert.Nil(t, run)
	var ge *gateway.Error
	require.ErrorAs(t, err, &ge)
	assert.Equal(t, "agent", ge.Method)
	assert.Equal(t, "missing scope: operator.write", ge.Message)
}

func TestAgentFailureWithPayloadAndError(t *testing.T) {
	srv := newServer(t, replyThen(func(c *gatewaytest.Conn, r gatewaytest.Request) {
		run, _ := c.Accept(r)
		run.Delta("partial ")
		_ = run.Fail(gatewaytest.Error{Code: "UNAVAILABLE", Message: "provider exploded"})
	}))
	c := dial(t, srv)
	ctx := testCtx(t)
	run, err := c.Agent(ctx, gateway.AgentRequest{Message: "hi", SessionKey: "s"})
	require.NoError(t, err)
	res, err := run.Wait(ctx)
	var ge *gateway.Error
	require.ErrorAs(t, err, &ge)
	assert.Equal(t, "provider exploded", ge.Message)
	require.NotNil(t, res)
	assert.Equal(t, "error", res.Status)
	assert.Equal(t, "provider exploded", res.Summary)
	assert.Equal(t, "partial ", res.StreamedText)
	assert.NotEqual(t, "provider exploded", res.Text, "an error message is never the answer")
}

func TestAgentFinalStatuses(t *testing.T) {
	for status, want := range map[string]error{"timeout": errdefs.ErrTimeout, "error": gateway.ErrRunFailed, "weird": gateway.ErrRunFailed} {
		t.Run(status, func(t *testing.T) {
			srv := newServer(t, replyThen(func(c *gatewaytest.Conn, r gatewaytest.Request) {
				run, _ := c.Accept(r)
				_ = run.Finish(status)
			}))
			c := dial(t, srv)
			ctx := testCtx(t)
			run, err := c.Agent(ctx, gateway.AgentRequest{Message: "hi", SessionKey: "s"})
			require.NoError(t, err)
			res, err := run.Wait(ctx)
			assert.ErrorIs(t, err, want)
			require.NotNil(t, res)
			assert.Equal(t, status, res.Status)
		})
	}
}

// TestAgentServerClosesMidRun: Wait must return promptly with a clear error.
func TestAgentServerClosesMidRun(t *testing.T) {
	for name, kill := range map[string]func(*gatewaytest.Conn){
		"close frame": func(c *gatewaytest.Conn) { c.Close(websocket.CloseInternalServerErr, "crash") },
		"drop":        func(c *gatewaytest.Conn) { c.Drop() },
	} {
		t.Run(name, func(t *testing.T) {
			srv := newServer(t, replyThen(func(c *gatewaytest.Conn, r gatewaytest.Request) {
				run, _ := c.Accept(r)
				run.Delta("half an ")
				run.Delta("answer")
				kill(c)
			}))
			c := dial(t, srv)
			ctx := testCtx(t)
			run, err := c.Agent(ctx, gateway.AgentRequest{Message: "hi", SessionKey: "s"})
			require.NoError(t, err)
			res, err := run.Wait(ctx) // testCtx turns a hang into a failure
			require.Error(t, err)
			assert.NotErrorIs(t, err, context.DeadlineExceeded)
			assert.ErrorIs(t, err, gateway.ErrClosed)
			assert.Contains(t, err.Error(), run.RunID())
			require.NotNil(t, res)
			assert.Empty(t, res.Status)
			assert.Equal(t, "half an answer", res.StreamedText)
			// The updates iterator ends too.
			text, _ := collect(ctx, run)
			assert.Equal(t, "half an answer", text)
		})
	}
}

// TestAgentEventsFilteredFailClosed interleaves events of another session,
// spoofed and key-less events and heartbeats with the run's own stream. None of
// the foreign content may reach the caller.
func TestAgentEventsFilteredFailClosed(t *testing.T) {
	srv := newServer(t, replyThen(func(c *gatewaytest.Conn, r gatewaytest.Request) {
		run, _ := c.Accept(r)
		id, own := run.RunID, run.SessionKey
		ev := func(name string, p map[string]any) { _ = c.Event(name, p) }
		// Another session's run (its own runId and key).
		ev("chat", gatewaytest.ChatDelta("other-run", "agent:main:beta", 1, "INTRUDER ", "INTRUDER "))
		run.Delta("ALPHA ")
		// Our runId but another session key.
		ev("chat", gatewaytest.ChatDelta(id, "agent:main:beta", 2, "INTRUDER ", "INTRUDER "))
		// Our runId without a session key; agent event without one.
		ev("chat", gatewaytest.ChatDelta(id, "", 3, "INTRUDER ", "INTRUDER "))
		ev("agent", gatewaytest.AgentEvent(id, "", 4, "tool", map[string]any{"name": "INTRUDER"}))
		// Our session but a heartbeat event.
		hb := gatewaytest.AgentEvent(id, own, 5, "assistant", map[string]any{"text": "INTRUDER"})
		hb["isHeartbeat"] = true
		ev("agent", hb)
		// Events without a runId.
		ev("chat", map[string]any{"sessionKey": own, "state": "delta", "deltaText": "INTRUDER"})
		// A heartbeat acknowledgement split over deltas in our own stream.
		run.Delta("HEART")
		run.Delta("BEAT_OK")
		run.Delta(" BRAVO")
		// A legitimate tool event of ours, with the key in another case.
		ev("agent", gatewaytest.AgentEvent(id, strings.ToUpper(own), 9, "tool", map[string]any{"name": "read_file"}))
		run.ChatFinal()
		_ = run.Finish("ok", gateway.HeartbeatToken, "ALPHA BRAVO")
	}))
	c := dial(t, srv)
	ctx := testCtx(t)
	run, err := c.Agent(ctx, gateway.AgentRequest{Message: "hi", SessionKey: "alpha"})
	require.NoError(t, err)
	text, all := collect(ctx, run)
	res, err := run.Wait(ctx)
	require.NoError(t, err)

	assert.Equal(t, "ALPHA  BRAVO", text)
	for _, u := range all {
		assert.NotContains(t, u, "INTRUDER")
		assert.NotContains(t, u, "HEARTBEAT")
	}
	assert.Contains(t, all, `agent:tool:{"name":"read_file"}`)
	assert.Equal(t, "ALPHA BRAVO", res.Text)
	assert.Equal(t, []gateway.Payload{{Text: "ALPHA BRAVO"}}, res.Payloads)
	assert.NotContains(t, res.StreamedText, "INTRUDER")
	assert.NotContains(t, res.StreamedText, "HEARTBEAT")
	assert.Equal(t, 4, res.FilteredEvents, "spoofed key, missing key (chat and agent), heartbeat")
	assert.Equal(t, int64(2), c.ForeignEvents(), "another run's delta and a delta without runId")
}

// TestAgentConcurrentSessionsIsolated runs two clients in two sessions on one
// gateway that broadcasts every event to every connection, interleaved.
func TestAgentConcurrentSessionsIsolated(t *testing.T) {
	var mu sync.Mutex
	runs := map[string]*gatewaytest.Run{}
	ready := make(chan struct{})
	srv := newServer(t, gatewaytest.WithHandler(func(c *gatewaytest.Conn) {
		r, err := c.Next(context.Background())
		if err != nil {
			return
		}
		run, _ := c.Accept(r)
		mu.Lock()
		runs[run.Params.Message] = run
		if len(runs) == 2 {
			close(ready)
		}
		mu.Unlock()
		<-c.Closed()
	}))
	a, b := dial(t, srv), dial(t, srv)
	ctx := testCtx(t)
	runA, err := a.Agent(ctx, gateway.AgentRequest{Message: "A", SessionKey: "user-a:run-1"})
	require.NoError(t, err)
	runB, err := b.Agent(ctx, gateway.AgentRequest{Message: "B", SessionKey: "user-b:run-1"})
	require.NoError(t, err)
	<-ready
	ra, rb := runs["A"], runs["B"]
	for i := range 50 {
		ra.Delta("ALPHA ")
		rb.Delta("BRAVO ")
		if i%10 == 0 {
			ra.AgentEvent("tool", map[string]any{"marker": "ALPHA"})
			rb.AgentEvent("tool", map[string]any{"marker": "BRAVO"})
		}
	}
	ra.ChatFinal()
	rb.ChatFinal()
	require.NoError(t, ra.Finish("ok", "ALPHA done"))
	require.NoError(t, rb.Finish("ok", "BRAVO done"))

	var wg sync.WaitGroup
	check := func(run *gateway.AgentRun, mine, theirs string) {
		defer wg.Done()
		text, all := collect(ctx, run)
		res, err := run.Wait(ctx)
		if !assert.NoError(t, err) {
			return
		}
		assert.Equal(t, strings.Repeat(mine+" ", 50), text)
		assert.Equal(t, mine+" done", res.Text)
		for _, u := range all {
			assert.NotContains(t, u, theirs)
		}
		assert.Zero(t, res.FilteredEvents, "the other run has its own runId: not even counted")
	}
	wg.Add(2)
	go check(runA, "ALPHA", "BRAVO")
	go check(runB, "BRAVO", "ALPHA")
	wg.Wait()
}

func TestAgentReplaceDeltas(t *testing.T) {
	srv := newServer(t, replyThen(func(c *gatewaytest.Conn, r gatewaytest.Request) {
		run, _ := c.Accept(r)
		for i, s := range []string{"Hel", "Hello", "Hello, wor", "Hello, world"} {
			p := gatewaytest.ChatDelta(run.RunID, run.SessionKey, int64(i+1), s, s)
			p["replace"] = true
			_ = c.Event("chat", p)
		}
		_ = run.Finish("ok")
	}))
	c := dial(t, srv)
	ctx := testCtx(t)
	run, err := c.Agent(ctx, gateway.AgentRequest{Message: "hi", SessionKey: "s"})
	require.NoError(t, err)
	text, _ := collect(ctx, run)
	res, err := run.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, "Hello, world", text)
	assert.Equal(t, "Hello, world", res.StreamedText)
	assert.Equal(t, "Hello, world", res.Text, "no payloads: the streamed text is the answer")
}

func TestAgentHeartbeatOnlyAnswerIsEmpty(t *testing.T) {
	srv := newServer(t, replyThen(func(c *gatewaytest.Conn, r gatewaytest.Request) {
		run, _ := c.Accept(r)
		run.Delta(gateway.HeartbeatToken)
		run.ChatFinal()
		_ = run.Finish("ok", "  "+gateway.HeartbeatToken+"\n")
	}))
	c := dial(t, srv)
	ctx := testCtx(t)
	run, err := c.Agent(ctx, gateway.AgentRequest{Message: "hi", SessionKey: "s"})
	require.NoError(t, err)
	res, err := run.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, "", res.Text)
	assert.Empty(t, res.Payloads)
	assert.Equal(t, "", res.StreamedText)
}

func TestAgentGatewayResolvesSessionKey(t *testing.T) {
	// The gateway names the session differently from the naive canonical form
	// (here: another agent); the client follows the gateway's accepted key.
	srv := newServer(t, replyThen(func(c *gatewaytest.Conn, r gatewaytest.Request) {
		var p gatewaytest.AgentParams
		_ = r.Decode(&p)
		_ = c.Reply(r.ID, map[string]any{"runId": p.IdempotencyKey, "status": "accepted", "sessionKey": "agent:ops:s"})
		_ = c.Event("chat", gatewaytest.ChatDelta(p.IdempotencyKey, "agent:main:s", 1, "WRONG", "WRONG"))
		_ = c.Event("chat", gatewaytest.ChatDelta(p.IdempotencyKey, "agent:ops:s", 2, "RIGHT", "RIGHT"))
		_ = c.Reply(r.ID, gatewaytest.FinalPayload(p.IdempotencyKey, "ok"))
	}))
	c := dial(t, srv)
	ctx := testCtx(t)
	run, err := c.Agent(ctx, gateway.AgentRequest{Message: "hi", SessionKey: "s"})
	require.NoError(t, err)
	res, err := run.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, "agent:ops:s", res.SessionKey)
	assert.Equal(t, "RIGHT", res.StreamedText)
}

func TestAgentUpdatesStopWithContext(t *testing.T) {
	srv := newServer(t, replyThen(func(c *gatewaytest.Conn, r gatewaytest.Request) {
		run, _ := c.Accept(r)
		run.Delta("one ")
		run.Delta("two ")
	}))
	c := dial(t, srv)
	ctx := testCtx(t)
	run, err := c.Agent(ctx, gateway.AgentRequest{Message: "hi", SessionKey: "s"})
	require.NoError(t, err)
	// Break after the first update: the rest stays queued for the next loop.
	for u := range run.Updates(ctx) {
		assert.Equal(t, "one ", u.Text)
		break
	}
	short, cancel := context.WithCancel(ctx)
	var texts []string
	for u := range run.Updates(short) {
		texts = append(texts, u.Text)
		cancel() // no more updates will come; the loop must end with the context
	}
	cancel()
	assert.Equal(t, []string{"two "}, texts)
	_, err = run.Wait(short)
	assert.ErrorIs(t, err, context.Canceled)
}

func TestAbortSessionsPatchAgentWait(t *testing.T) {
	srv := newServer(t) // EchoAgent checks the params against the closed schemas
	c := dial(t, srv)
	ctx := testCtx(t)

	ok, err := c.Abort(ctx, "agent:main:s1", "run-1")
	require.NoError(t, err)
	assert.True(t, ok)
	ok, err = c.Abort(ctx, "agent:main:s1", "")
	require.NoError(t, err)
	assert.False(t, ok)
	_, err = c.Abort(ctx, " ", "")
	assert.ErrorIs(t, err, errdefs.ErrInvalidSpec)

	res, err := c.SessionsPatch(ctx, "S1", gateway.SessionPatch{Model: "fake/other-model"})
	require.NoError(t, err)
	assert.Equal(t, "agent:main:s1", res.Key)
	assert.Equal(t, "fake", res.ModelProvider)
	assert.Equal(t, "other-model", res.Model)
	_, err = c.SessionsPatch(ctx, "s1", gateway.SessionPatch{ClearModel: true})
	require.NoError(t, err)
	for _, p := range []gateway.SessionPatch{{}, {Model: "x", ClearModel: true}} {
		_, err = c.SessionsPatch(ctx, "s1", p)
		assert.ErrorIs(t, err, errdefs.ErrInvalidSpec)
	}

	ws, err := c.AgentWait(ctx, "run-1", time.Second)
	require.NoError(t, err)
	assert.Equal(t, "ok", ws.Status)
	assert.Equal(t, int64(2), ws.EndedAt)
	_, err = c.AgentWait(ctx, "", time.Second)
	assert.ErrorIs(t, err, errdefs.ErrInvalidSpec)
}

func TestRunAbort(t *testing.T) {
	abortParams := make(chan string, 1)
	srv := newServer(t, gatewaytest.WithHandler(func(c *gatewaytest.Conn) {
		r, err := c.Next(context.Background())
		if err != nil {
			return
		}
		run, _ := c.Accept(r)
		a, err := c.Next(context.Background())
		if err != nil {
			return
		}
		abortParams <- a.Method + " " + string(a.Params)
		_ = c.Reply(a.ID, map[string]any{"ok": true, "aborted": true, "runIds": []string{run.RunID}})
		_ = run.Finish("timeout")
	}))
	c := dial(t, srv)
	ctx := testCtx(t)
	run, err := c.Agent(ctx, gateway.AgentRequest{Message: "hi", SessionKey: "s", IdempotencyKey: "r-9"})
	require.NoError(t, err)
	ok, err := run.Abort(ctx)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, `chat.abort {"sessionKey":"agent:main:s","runId":"r-9"}`, <-abortParams)
	res, err := run.Wait(ctx)
	assert.ErrorIs(t, err, errdefs.ErrTimeout)
	assert.Equal(t, "aborted", res.Summary)
}

func TestCanonicalSessionKey(t *testing.T) {
	for _, tc := range []struct{ agent, key, want string }{
		{"", "Run-1", "agent:main:run-1"},
		{"", "  spaced  ", "agent:main:spaced"},
		{"Ops", "x", "agent:ops:x"},
		{"", "agent:Work:Thing", "agent:work:thing"},
		{"", "GLOBAL", "global"},
		{"", "unknown", "unknown"},
		{"", "", ""},
		{"", "main", "agent:main:main"},
	} {
		assert.Equal(t, tc.want, gateway.CanonicalSessionKey(tc.agent, tc.key), "%q %q", tc.agent, tc.key)
	}
	assert.True(t, gateway.ValidAgentID("main"))
	assert.True(t, gateway.ValidAgentID("a_b-9"))
	assert.False(t, gateway.ValidAgentID("-x"))
	assert.False(t, gateway.ValidAgentID("a b"))
}

// TestResponseReadBeforeConnectionEndsIsKept holds the writer's report of the
// request until the connection has ended, after the gateway answered and dropped
// the connection. The answer the reader already delivered must win: an accepted
// run that Agent reported as failed would run, and bill, unseen by the caller.
func TestResponseReadBeforeConnectionEndsIsKept(t *testing.T) {
	holdWrite := gateway.WithAfterWriteHook(func(c *gateway.Client) { <-c.Done() })

	t.Run("agent", func(t *testing.T) {
		srv := newServer(t, replyThen(func(c *gatewaytest.Conn, r gatewaytest.Request) {
			run, _ := c.Accept(r)
			run.Delta("half an ")
			run.Delta("answer")
			c.Drop()
		}))
		c := dial(t, srv, holdWrite)
		ctx := testCtx(t)
		run, err := c.Agent(ctx, gateway.AgentRequest{Message: "hi", SessionKey: "s", IdempotencyKey: "kept-1"})
		require.NoError(t, err, "the gateway accepted the run before the connection ended")
		assert.Equal(t, "kept-1", run.RunID())
		res, err := run.Wait(ctx)
		assert.ErrorIs(t, err, gateway.ErrClosed)
		require.NotNil(t, res)
		assert.Equal(t, "half an answer", res.StreamedText)
	})

	t.Run("request", func(t *testing.T) {
		srv := newServer(t, replyThen(func(c *gatewaytest.Conn, r gatewaytest.Request) {
			_ = c.Reply(r.ID, map[string]any{"answer": 42})
			c.Drop()
		}))
		c := dial(t, srv, holdWrite)
		raw, err := c.Request(testCtx(t), "health", nil)
		require.NoError(t, err, "the response arrived before the connection ended")
		assert.JSONEq(t, `{"answer":42}`, string(raw))
		<-c.Done()
		assert.ErrorIs(t, c.Err(), gateway.ErrClosed)
	})
}
