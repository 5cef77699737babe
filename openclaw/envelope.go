package openclaw

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// Sentinel errors of ParseResult and ParseRun; the typed errors below wrap them.
var (
	// ErrCLI reports a CLI failure envelope: {"ok":false,"error":{type,message}}.
	// See *CLIError.
	ErrCLI = errors.New("openclaw CLI failed")
	// ErrAgent reports an agent turn that ended in error (meta.error, an error
	// payload, an aborted turn, or a non-zero exit with a result). See *AgentError.
	ErrAgent = errors.New("openclaw agent turn failed")
	// ErrNoEnvelope reports output that is not an OpenClaw JSON envelope (a crash,
	// a kill, truncated output). See *ExitError.
	ErrNoEnvelope = errors.New("openclaw printed no JSON envelope")
	// ErrInterrupted reports a CLI ended by a signal (exit 130, 137, 143, ...).
	// It comes with ErrNoEnvelope in an *ExitError.
	ErrInterrupted = errors.New("openclaw interrupted by a signal")
)

// MaxErrorOutput caps the stderr (and stdout) an error carries: the last bytes,
// where the CLI prints its reason.
const MaxErrorOutput = 4 << 10

// Result is a parsed `openclaw agent --json` result envelope. Fields beyond the
// ones decoded here stay available in Raw.
type Result struct {
	// Payloads are the reply parts, in order.
	Payloads []Payload `json:"payloads"`
	// Meta describes the turn.
	Meta Meta `json:"meta"`
	// ExitCode is the CLI's exit code.
	ExitCode int `json:"-"`
	// Raw is the whole envelope as printed.
	Raw json.RawMessage `json:"-"`
}

// Payload is one reply part.
type Payload struct {
	// Text is the reply text.
	Text string `json:"text"`
	// MediaURL is an attached media URL (JSON null becomes "").
	MediaURL string `json:"mediaUrl"`
	// MediaURLs are further media URLs.
	MediaURLs []string `json:"mediaUrls,omitempty"`
	// IsError marks a part that is an error message, not an answer.
	IsError bool `json:"isError,omitempty"`
}

// Meta is the envelope's meta object.
type Meta struct {
	// DurationMs is the turn's duration in milliseconds.
	DurationMs int64 `json:"durationMs"`
	// AgentMeta says which session, provider and model ran and what they used.
	AgentMeta AgentMeta `json:"agentMeta"`
	// Aborted reports a turn cut short.
	Aborted bool `json:"aborted"`
	// StopReason is the model's stop reason, e.g. "stop" or "tool_calls".
	StopReason string `json:"stopReason"`
	// Error is set when the turn failed; Kind is e.g. "context_overflow",
	// "compaction_failure", "retry_limit" or "incomplete_turn".
	Error *TurnError `json:"error"`
	// TimeoutPhase is set when the turn hit its timeout (e.g. "provider").
	TimeoutPhase string `json:"timeoutPhase"`
	// ModelFallbackStopReason says why model fallback stopped, e.g.
	// "agent_run_terminal_timeout".
	ModelFallbackStopReason string `json:"modelFallbackStopReason"`
}

// Duration is DurationMs as a time.Duration.
func (m Meta) Duration() time.Duration { return time.Duration(m.DurationMs) * time.Millisecond }

// AgentMeta identifies what ran.
type AgentMeta struct {
	SessionID string `json:"sessionId"`
	Provider  string `json:"provider"`
	Model     string `json:"model"`
	// Usage is OpenClaw's own token count: a UX hint only. LiteLLM's spend logs,
	// matched through the proxy's audit, are the billing truth.
	Usage Usage `json:"usage"`
}

// Usage counts tokens as OpenClaw reports them.
type Usage struct {
	Input      int64 `json:"input"`
	Output     int64 `json:"output"`
	CacheRead  int64 `json:"cacheRead"`
	CacheWrite int64 `json:"cacheWrite"`
	Total      int64 `json:"total"`
}

// TurnError is meta.error.
type TurnError struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// Text returns the answer: the texts of the non-error payloads joined by blank
// lines.
func (r *Result) Text() string {
	var parts []string
	for _, p := range r.Payloads {
		if !p.IsError && p.Text != "" {
			parts = append(parts, p.Text)
		}
	}
	return strings.Join(parts, "\n\n")
}

// TimedOut reports whether the turn hit its timeout.
func (r *Result) TimedOut() bool {
	return r.Meta.TimeoutPhase != "" || strings.Contains(r.Meta.ModelFallbackStopReason, "timeout")
}

// CLIError is a CLI failure envelope: the command failed outside a completed
// turn (bad flags, invalid config, the LLM unreachable after retries, ...). It
// matches ErrCLI.
type CLIError struct {
	ExitCode int
	// Type is error.type, e.g. "cli_error".
	Type string
	// Message is error.message, already sanitized by OpenClaw.
	Message string
	// RunID and Origin are set when a gateway accepted the run (not in --local).
	RunID, Origin string
	// Stderr is the tail of the CLI's stderr, at most MaxErrorOutput bytes.
	Stderr string
}

// Error implements error.
func (e *CLIError) Error() string {
	return fmt.Sprintf("openclaw CLI failed (exit %d, %s): %s", e.ExitCode, e.Type, e.Message)
}

// Unwrap returns ErrCLI.
func (e *CLIError) Unwrap() error { return ErrCLI }

// AgentError is a turn that produced a result envelope but failed. It matches
// ErrAgent, and port.ErrTimeout when the turn timed out.
type AgentError struct {
	ExitCode int
	// Kind is meta.error.kind, or "aborted", "error_payload", "stop_error" or
	// "exit_status" when meta.error is absent.
	Kind string
	// Message is meta.error.message or the first error payload's text.
	Message string
	// Timeout reports a turn that hit its timeout.
	Timeout bool
}

// Error implements error.
func (e *AgentError) Error() string {
	s := fmt.Sprintf("openclaw agent turn failed (exit %d, %s)", e.ExitCode, e.Kind)
	if e.Timeout {
		s += " after a timeout"
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Unwrap returns ErrAgent, and port.ErrTimeout for a timeout.
func (e *AgentError) Unwrap() []error {
	if e.Timeout {
		return []error{ErrAgent, port.ErrTimeout}
	}
	return []error{ErrAgent}
}

// ExitError is a CLI that left no usable envelope: killed by a signal, crashed,
// or printed something else. It matches ErrNoEnvelope; ErrInterrupted when a
// signal ended it; port.ErrOOMKilled for exit 137 (SIGKILL, the OOM killer's
// signal, as the seed's exit code table has it).
type ExitError struct {
	ExitCode int
	// Signal names the signal for exit codes 129-159 (e.g. "SIGTERM"), else "".
	Signal string
	// Reason says what was wrong with stdout.
	Reason string
	// Stdout and Stderr are the tails of the streams, at most MaxErrorOutput bytes.
	Stdout, Stderr string
	// Truncated reports stdout cut by the runner's output limit.
	Truncated bool
}

// Error implements error.
func (e *ExitError) Error() string {
	s := fmt.Sprintf("openclaw exited %d", e.ExitCode)
	if e.Signal != "" {
		s += " (" + e.Signal + ")"
	}
	s += " without a JSON envelope: " + e.Reason
	if e.Truncated {
		s += " (stdout was truncated)"
	}
	if st := strings.TrimSpace(e.Stderr); st != "" {
		s += "; stderr: " + lastLines(st, 3)
	}
	return s
}

// Unwrap returns ErrNoEnvelope, plus ErrInterrupted and port.ErrOOMKilled where
// they apply.
func (e *ExitError) Unwrap() []error {
	errs := []error{ErrNoEnvelope}
	if e.Signal != "" {
		errs = append(errs, ErrInterrupted)
	}
	if e.ExitCode == 137 {
		errs = append(errs, port.ErrOOMKilled)
	}
	return errs
}

// ParseResult interprets a finished `openclaw agent --json` run:
//
//	exit 0, result envelope          → *Result, nil (or an *AgentError, below)
//	exit 1, {"ok":false,"error":...} → nil, *CLIError
//	exit 1, result envelope          → *Result and *AgentError (error, timeout or
//	                                   cancellation: OpenClaw prints the result, then
//	                                   exits 1)
//	exit 130/143 (SIGINT/SIGTERM), 137 (SIGKILL, e.g. OOM), other 128+n,
//	or stdout that is not an envelope → nil, *ExitError
//
// A result envelope whose meta.error is set, whose turn was aborted or timed out,
// or that carries only error payloads, also gives an *AgentError, with the
// *Result, whatever the exit code.
func ParseResult(exitCode int, stdout, stderr []byte) (*Result, error) {
	return parse(exitCode, stdout, stderr, false)
}

// ParseRun is ParseResult for a port.SandboxRunner outcome. A run the runner
// reports as not completed (timeout, OOM, ...) returns runErr unchanged: the
// runner's classification beats guessing from exit codes.
func ParseRun(res *port.RunResult, runErr error) (*Result, error) {
	if runErr != nil {
		return nil, runErr
	}
	if res == nil {
		return nil, fmt.Errorf("openclaw: %w: no run result", port.ErrInternal)
	}
	return parse(res.ExitCode, res.Stdout, res.Stderr, res.StdoutTruncated)
}

func parse(exitCode int, stdout, stderr []byte, truncated bool) (*Result, error) {
	exitErr := func(reason string) *ExitError {
		e := &ExitError{ExitCode: exitCode, Reason: reason, Stdout: tail(stdout), Stderr: tail(stderr), Truncated: truncated}
		if exitCode > 128 && exitCode < 160 {
			e.Signal = signalName(exitCode - 128)
		}
		return e
	}
	if exitCode > 128 {
		// A signal ended the process before it could finish; whatever it printed
		// is not a complete answer.
		return nil, exitErr("ended by a signal")
	}
	body := bytes.TrimSpace(stdout)
	if len(body) == 0 {
		return nil, exitErr("stdout is empty")
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(body, &probe); err != nil {
		return nil, exitErr("stdout is not a JSON object: " + err.Error())
	}

	if ok, has := probe["ok"]; has && string(ok) == "false" {
		var env struct {
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
			RunID  string `json:"runId"`
			Origin string `json:"origin"`
		}
		if err := json.Unmarshal(body, &env); err != nil {
			return nil, exitErr("failure envelope does not decode: " + err.Error())
		}
		return nil, &CLIError{
			ExitCode: exitCode, Type: env.Error.Type, Message: env.Error.Message,
			RunID: env.RunID, Origin: env.Origin, Stderr: tail(stderr),
		}
	}
	if _, hasMeta := probe["meta"]; !hasMeta {
		return nil, exitErr("JSON object is neither a result (no meta) nor a failure envelope")
	}
	r := &Result{ExitCode: exitCode, Raw: json.RawMessage(bytes.Clone(body))}
	if err := json.Unmarshal(body, r); err != nil {
		return nil, exitErr("result envelope does not decode: " + err.Error())
	}
	return r, r.failure()
}

// failure returns the turn's error, if it failed.
func (r *Result) failure() error {
	e := &AgentError{ExitCode: r.ExitCode, Timeout: r.TimedOut()}
	firstErrPayload := ""
	answered := false
	for _, p := range r.Payloads {
		if p.IsError && firstErrPayload == "" {
			firstErrPayload = p.Text
		}
		if !p.IsError && (p.Text != "" || p.MediaURL != "" || len(p.MediaURLs) > 0) {
			answered = true
		}
	}
	switch {
	case r.Meta.Error != nil:
		e.Kind, e.Message = r.Meta.Error.Kind, r.Meta.Error.Message
	case r.Meta.Aborted:
		e.Kind, e.Message = "aborted", firstErrPayload
	case firstErrPayload != "" && !answered:
		e.Kind, e.Message = "error_payload", firstErrPayload
	case r.Meta.StopReason == "error":
		e.Kind, e.Message = "stop_error", firstErrPayload
	case r.ExitCode != 0:
		e.Kind, e.Message = "exit_status", firstErrPayload
	case e.Timeout:
		e.Kind = "timeout"
	default:
		return nil
	}
	return e
}

func tail(b []byte) string {
	if len(b) > MaxErrorOutput {
		b = b[len(b)-MaxErrorOutput:]
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// signalNames are the Linux numbers of the signals a CLI is usually ended by.
var signalNames = map[int]string{1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 6: "SIGABRT", 9: "SIGKILL", 11: "SIGSEGV", 13: "SIGPIPE", 15: "SIGTERM"}

func signalName(n int) string {
	if s, ok := signalNames[n]; ok {
		return s
	}
	return fmt.Sprintf("signal %d", n)
}
