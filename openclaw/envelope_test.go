package openclaw_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsandbox/sandbox/openclaw"
	"github.com/agentsandbox/sandbox/port"
)

// The fixtures in testdata/envelopes were printed by the real openclaw 2026.9.6
// (TestOneShotRealCLI -update), against a fake LLM.
func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "envelopes", name))
	require.NoError(t, err)
	return b
}

func TestParseResultSuccessFixture(t *testing.T) {
	res, err := openclaw.ParseResult(0, fixture(t, "success.exit0.json"), []byte("[agent/embedded] noise on stderr"))
	require.NoError(t, err)
	assert.Equal(t, "ANSWER-SHELLSAFE", res.Text())
	require.Len(t, res.Payloads, 1)
	assert.Equal(t, openclaw.Payload{Text: "ANSWER-SHELLSAFE"}, res.Payloads[0], "mediaUrl null decodes to empty")
	assert.Equal(t, "run-testoneshotrealcli-success", res.Meta.AgentMeta.SessionID)
	assert.Equal(t, "litellm", res.Meta.AgentMeta.Provider)
	assert.Equal(t, "gemini-2.5-flash", res.Meta.AgentMeta.Model)
	assert.Equal(t, openclaw.Usage{Input: 11, Output: 3, Total: 14}, res.Meta.AgentMeta.Usage)
	assert.Equal(t, "stop", res.Meta.StopReason)
	assert.False(t, res.Meta.Aborted)
	assert.Nil(t, res.Meta.Error)
	assert.False(t, res.TimedOut())
	assert.Greater(t, res.Meta.Duration(), time.Duration(0))
	assert.Equal(t, time.Duration(res.Meta.DurationMs)*time.Millisecond, res.Meta.Duration())
	assert.Equal(t, 0, res.ExitCode)
	assert.Contains(t, string(res.Raw), `"systemPromptReport"`, "fields beyond the typed ones stay in Raw")
}

func TestParseResultTimeoutFixture(t *testing.T) {
	res, err := openclaw.ParseResult(1, fixture(t, "timeout.exit1.json"), nil)
	require.NotNil(t, res)
	assert.True(t, res.TimedOut())
	assert.Empty(t, res.Text())
	require.Len(t, res.Payloads, 1)
	assert.True(t, res.Payloads[0].IsError)

	var ae *openclaw.AgentError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, 1, ae.ExitCode)
	assert.Equal(t, "incomplete_turn", ae.Kind)
	assert.True(t, ae.Timeout)
	assert.Contains(t, ae.Message, "timed out")
	assert.ErrorIs(t, err, openclaw.ErrAgent)
	assert.ErrorIs(t, err, port.ErrTimeout)
	assert.False(t, errors.Is(err, openclaw.ErrCLI))
}

func TestParseResultCLIErrorFixture(t *testing.T) {
	stderr := strings.Repeat("x", 10000) + "\n[openclaw] Reason: LLM request failed"
	res, err := openclaw.ParseResult(1, fixture(t, "cli-error.exit1.json"), []byte(stderr))
	assert.Nil(t, res)
	var ce *openclaw.CLIError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, openclaw.CLIError{
		ExitCode: 1, Type: "cli_error",
		Message: "LLM request failed: provider rejected the request schema or tool payload.",
		Stderr:  stderr[len(stderr)-openclaw.MaxErrorOutput:],
	}, *ce)
	assert.ErrorIs(t, err, openclaw.ErrCLI)
	assert.False(t, errors.Is(err, openclaw.ErrAgent))
	assert.Contains(t, err.Error(), "provider rejected")
}

func TestParseResultCases(t *testing.T) {
	cases := []struct {
		name     string
		exit     int
		stdout   string
		text     string // expected Result.Text when a result is returned
		noResult bool
		is       []error
		isNot    []error
		kind     string // AgentError.Kind
		signal   string // ExitError.Signal
	}{
		{name: "plain success", exit: 0, stdout: `{"payloads":[{"text":"a"},{"text":"b","mediaUrl":"https://x/y.png"}],"meta":{"durationMs":5,"agentMeta":{"sessionId":"s"}}}`, text: "a\n\nb"},
		{name: "unknown fields tolerated", exit: 0, stdout: `{"payloads":[{"text":"a","future":1}],"meta":{"durationMs":1,"novel":{"x":[1]}},"deliveryStatus":{}}`, text: "a"},
		{name: "meta.error with exit 0", exit: 0, stdout: `{"payloads":[{"text":"Context overflow","isError":true}],"meta":{"durationMs":1,"error":{"kind":"context_overflow","message":"prompt too large"}}}`, is: []error{openclaw.ErrAgent}, isNot: []error{port.ErrTimeout}, kind: "context_overflow"},
		{name: "aborted", exit: 1, stdout: `{"payloads":[],"meta":{"durationMs":1,"aborted":true}}`, is: []error{openclaw.ErrAgent}, kind: "aborted"},
		{name: "only error payloads", exit: 0, stdout: `{"payloads":[{"text":"boom","isError":true}],"meta":{"durationMs":1}}`, is: []error{openclaw.ErrAgent}, kind: "error_payload"},
		{name: "stop reason error", exit: 0, stdout: `{"payloads":[{"text":"partial"}],"meta":{"durationMs":1,"stopReason":"error"}}`, text: "partial", is: []error{openclaw.ErrAgent}, kind: "stop_error"},
		{name: "exit 1 with a clean result", exit: 1, stdout: `{"payloads":[{"text":"a"}],"meta":{"durationMs":1}}`, text: "a", is: []error{openclaw.ErrAgent}, kind: "exit_status"},
		{name: "timeout phase", exit: 1, stdout: `{"payloads":[],"meta":{"durationMs":1,"timeoutPhase":"provider"}}`, is: []error{openclaw.ErrAgent, port.ErrTimeout}, kind: "exit_status"},
		{name: "cli failure with gateway provenance", exit: 1, stdout: `{"ok":false,"error":{"type":"cli_error","message":"gone"},"runId":"r1","origin":"gateway"}`, noResult: true, is: []error{openclaw.ErrCLI}},
		{name: "cli failure with exit 0", exit: 0, stdout: `{"ok":false,"error":{"type":"cli_error","message":"odd"}}`, noResult: true, is: []error{openclaw.ErrCLI}},
		{name: "sigint", exit: 130, stdout: "", noResult: true, is: []error{openclaw.ErrNoEnvelope, openclaw.ErrInterrupted}, isNot: []error{port.ErrOOMKilled}, signal: "SIGINT"},
		{name: "sigterm after partial output", exit: 143, stdout: `{"payloads":[{"text":"a"}],"meta":{}}`, noResult: true, is: []error{openclaw.ErrNoEnvelope, openclaw.ErrInterrupted}, signal: "SIGTERM"},
		{name: "sigkill is the OOM exit", exit: 137, stdout: "", noResult: true, is: []error{openclaw.ErrNoEnvelope, openclaw.ErrInterrupted, port.ErrOOMKilled}, signal: "SIGKILL"},
		{name: "unknown signal", exit: 128 + 10, stdout: "", noResult: true, is: []error{openclaw.ErrInterrupted}, signal: "signal 10"},
		{name: "empty stdout", exit: 1, stdout: "  \n", noResult: true, is: []error{openclaw.ErrNoEnvelope}, isNot: []error{openclaw.ErrInterrupted}},
		{name: "crash text", exit: 1, stdout: "TypeError: cannot read properties of undefined", noResult: true, is: []error{openclaw.ErrNoEnvelope}},
		{name: "json array", exit: 0, stdout: `[1,2]`, noResult: true, is: []error{openclaw.ErrNoEnvelope}},
		{name: "object without meta", exit: 0, stdout: `{"valid":true}`, noResult: true, is: []error{openclaw.ErrNoEnvelope}},
		{name: "wrong types", exit: 0, stdout: `{"payloads":"nope","meta":{}}`, noResult: true, is: []error{openclaw.ErrNoEnvelope}},
		{name: "truncated json", exit: 0, stdout: `{"payloads":[{"text":"a"`, noResult: true, is: []error{openclaw.ErrNoEnvelope}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := openclaw.ParseResult(tc.exit, []byte(tc.stdout), []byte("line one\nline two\n[openclaw] Reason: because"))
			if tc.noResult {
				assert.Nil(t, res)
			} else {
				require.NotNil(t, res, "err: %v", err)
				assert.Equal(t, tc.text, res.Text())
				assert.Equal(t, tc.exit, res.ExitCode)
			}
			for _, want := range tc.is {
				assert.ErrorIs(t, err, want)
			}
			for _, not := range tc.isNot {
				assert.False(t, errors.Is(err, not), "unexpectedly %v", not)
			}
			if len(tc.is) == 0 {
				assert.NoError(t, err)
			}
			if tc.kind != "" {
				var ae *openclaw.AgentError
				require.ErrorAs(t, err, &ae)
				assert.Equal(t, tc.kind, ae.Kind)
			}
			var ee *openclaw.ExitError
			if errors.As(err, &ee) {
				assert.Equal(t, tc.signal, ee.Signal)
				assert.Equal(t, tc.exit, ee.ExitCode)
				assert.Contains(t, err.Error(), "[openclaw] Reason: because", "stderr's last lines explain the failure")
			}
		})
	}
}

func TestParseResultCapsOutput(t *testing.T) {
	huge := strings.Repeat("é", openclaw.MaxErrorOutput) + "!" // 2 bytes each, odd total: the cut splits one
	_, err := openclaw.ParseResult(1, []byte(huge), []byte(huge))
	var ee *openclaw.ExitError
	require.ErrorAs(t, err, &ee)
	assert.LessOrEqual(t, len(ee.Stdout), openclaw.MaxErrorOutput+2)
	assert.LessOrEqual(t, len(ee.Stderr), openclaw.MaxErrorOutput+2)
	assert.True(t, strings.HasSuffix(ee.Stderr, "é!"), "the tail is kept")
	assert.True(t, utf8.ValidString(ee.Stderr), "no broken UTF-8 sequence")
	assert.True(t, strings.HasPrefix(ee.Stderr, "\uFFFD"), "the split rune is replaced")
}

func TestParseRun(t *testing.T) {
	runErr := &port.RunError{Code: port.CodeTimeout}
	res, err := openclaw.ParseRun(&port.RunResult{ExitCode: -1, ErrorCode: port.CodeTimeout}, runErr)
	assert.Nil(t, res)
	assert.Same(t, runErr, err, "the runner's classification wins")

	_, err = openclaw.ParseRun(nil, nil)
	assert.ErrorIs(t, err, port.ErrInternal)

	res, err = openclaw.ParseRun(&port.RunResult{ExitCode: 0, Stdout: fixture(t, "success.exit0.json")}, nil)
	require.NoError(t, err)
	assert.Equal(t, "ANSWER-SHELLSAFE", res.Text())

	full := fixture(t, "success.exit0.json")
	_, err = openclaw.ParseRun(&port.RunResult{ExitCode: 0, Stdout: full[:1000], StdoutTruncated: true}, nil)
	var ee *openclaw.ExitError
	require.ErrorAs(t, err, &ee)
	assert.True(t, ee.Truncated)
	assert.Contains(t, err.Error(), "truncated")
}
