package port

import (
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
)

// Defaults applied by RunSpec.WithDefaults.
const (
	DefaultUser        = "1001:1001"
	DefaultPIDs        = 256
	DefaultMemoryBytes = 512 << 20
	DefaultTmpfsBytes  = 64 << 20
	DefaultOutputLimit = 2 << 20
	DefaultTimeout     = 10 * time.Minute
	// DefaultOpenFiles caps a sandbox's open files (RLIMIT_NOFILE), so one run cannot
	// hold the host's descriptors through the sockets it opens to its proxy.
	DefaultOpenFiles = 1024
	// MaxOpenFiles is the largest OpenFiles a spec may ask for.
	MaxOpenFiles = bridgeapi.MaxOpenFiles

	// WorkspacePath is where RunSpec.WorkspaceDir appears inside the sandbox.
	WorkspacePath = "/workspace"
	// LLMSocketDir is where the proxy's socket directory appears inside the sandbox.
	// It is a top-level path on purpose: a mount under the tmpfs /run would be hidden.
	LLMSocketDir = bridgeapi.SocketDir
	// LLMSocketName is the socket's file name inside LLMSocketDir.
	LLMSocketName = bridgeapi.LLMSocketName
	// BridgeAddr is where the in-sandbox bridge listens; agents use
	// OPENAI_API_BASE=http://127.0.0.1:8080 (an address, not a name:
	// static agents in scratch images may have no resolver for "localhost").
	BridgeAddr = bridgeapi.LLMAddr
)

// SandboxRunner runs one command to completion in a locked-down container.
//
// RunOnce validates spec (errors wrap ErrInvalidSpec; nothing is created), creates the
// container, runs it, collects its output and removes it on every path, including
// cancellation of ctx and a panic unwinding through the caller.
//
// A non-zero exit code is not an error. RunOnce returns a non-nil *RunResult whenever
// the container was created, together with a *RunError when the run did not complete:
// errors.Is(err, ErrTimeout), ErrOOMKilled, ErrContainerFailed or ErrInternal tell why.
// A daemon that cannot be reached gives an error wrapping ErrUnavailable.
type SandboxRunner interface {
	RunOnce(ctx context.Context, spec RunSpec) (*RunResult, error)
}

// Sweeper removes resources an adapter created and lost track of (the host process
// died, say). Only resources carrying the adapter's owner label are considered.
type Sweeper interface {
	Sweep(ctx context.Context, opts SweepOptions) (SweepReport, error)
}

// SweepOptions selects what a Sweep removes.
type SweepOptions struct {
	// OlderThan is a grace period: resources created less than this long ago are kept,
	// so a sweep never races a run that is just starting. Zero sweeps everything of ours.
	OlderThan time.Duration
	// RunID, if set, restricts the sweep to one run.
	RunID string
	// DryRun reports what would be removed without removing it.
	DryRun bool
}

// Validate checks o as every Sweep does before touching anything: a RunID, if set,
// must be valid (ValidateRunID) and OlderThan must not be negative. Errors wrap
// ErrInvalidSpec.
func (o SweepOptions) Validate() error {
	if o.RunID != "" {
		if err := ValidateRunID(o.RunID); err != nil {
			return err
		}
	}
	if o.OlderThan < 0 {
		return Invalidf("OlderThan is negative")
	}
	return nil
}

// SweepReport lists what a Sweep removed (or, with DryRun, would remove).
type SweepReport struct {
	// Removed names each resource as "kind:id", e.g. "container:3f2a…" or "volume:llm-sock-r1".
	Removed []string
	// Errors are per-resource failures; the sweep carries on past them.
	Errors []error
}

// NetworkMode says what network a sandbox gets. The zero value is NetworkNone.
type NetworkMode struct {
	// Internal names a pre-existing internal network (no route out) to join instead of
	// having none. Empty means no network at all: loopback only.
	Internal string
}

// Mount is an extra host path visible in the sandbox.
type Mount struct {
	Source   string // absolute host path; it must exist
	Target   string // absolute path in the sandbox
	Writable bool   // mounts are read-only unless asked
}

// Limits bound a run's resources. Zero fields take the defaults.
type Limits struct {
	Timeout     time.Duration // wall-clock limit; the context may end it sooner
	MemoryBytes int64         // memory limit; swap is set equal, so there is none extra
	PIDs        int64         // process limit (fork bombs stop here)
	NanoCPUs    int64         // CPU limit in 1e-9 CPUs; zero means unlimited
	TmpfsBytes  int64         // size of each of /tmp and /run
	OpenFiles   int64         // RLIMIT_NOFILE, soft and hard (default DefaultOpenFiles)
}

// LLMSocket is how a per-run proxy's socket directory reaches a sandbox. Exactly one of
// HostDir and Volume is set, depending on the proxy adapter.
type LLMSocket struct {
	// HostDir is a host directory holding LLMSocketName, bind-mounted at LLMSocketDir.
	HostDir string
	// Volume is a runtime volume holding LLMSocketName, mounted at LLMSocketDir.
	Volume string
	// Egress says the directory also holds EgressSocketName and EgressCAName: the
	// bridge then listens on EgressProxyAddr and the runner points the agent's proxy
	// and CA variables at it (see EgressEnv).
	Egress bool
}

// RunSpec describes one sandboxed run.
type RunSpec struct {
	// RunID is host-generated and validated with ValidateRunID.
	RunID string
	// Image is the container image reference.
	Image string
	// Argv is the command. It is passed as an argv, never joined into a shell string.
	// Empty means the image's default command (ENTRYPOINT and CMD); a non-empty Argv
	// replaces both the image's ENTRYPOINT and its CMD, on every runner, so Argv[0]
	// must be the program itself.
	Argv []string
	// Env is the caller's environment, set over the image's. The library's own
	// variables (LibraryEnv: HOSTNAME, and LLMEnv with LLM access) win over a variable
	// of the same name here; SandboxEnv is the result.
	Env map[string]string
	// WorkspaceDir is a host directory mounted read-write at /workspace; empty for none.
	WorkspaceDir string
	// Mounts are extra mounts, read-only unless Writable.
	Mounts []Mount
	// Limits bound the run.
	Limits Limits
	// Network defaults to none.
	Network NetworkMode
	// User is "uid:gid" (default DefaultUser). Root ("0" or "root") is refused.
	User string
	// LLM, if set, mounts a proxy's socket directory and starts the bridge on BridgeAddr
	// before the agent's argv runs.
	LLM *LLMSocket
	// OwnBridge says the image brings its own bridge to LLM's socket. Without it, a
	// run with LLM access on a runner that has no bridge (WithBridge) is refused with
	// ErrInvalidSpec: the agent would find nothing on BridgeAddr.
	OwnBridge bool
	// OutputLimit caps each of stdout and stderr (default DefaultOutputLimit).
	OutputLimit int
	// Labels are extra labels for the container; the LabelPrefix namespace is reserved.
	Labels map[string]string
	// Stdout and Stderr, if set, receive the streams as they are produced, while the
	// run goes on: the same bytes RunResult keeps, so at most OutputLimit each. They are
	// written from the runner's goroutines, one write at a time per stream; a writer
	// that returns an error gets nothing more (the capture goes on), and a slow one
	// slows the sandbox's output, so hand off to a buffer or channel when in doubt. With
	// a bridge, stderr can end with the bridge's one-line OOM notice, which RunResult
	// leaves out.
	Stdout, Stderr io.Writer
	// Preload, if set, asks for a sandbox whose agent runtime was started before the
	// run (a warm pool whose template has the same Preload; see Preload). Runners and
	// pools without such a sandbox run Argv cold, with Preload's mounts mounted like
	// Mounts (ColdSpec); RunResult.Start says which it was.
	Preload *Preload
}

// Preload pre-boots an agent runtime in each sandbox of a warm pool, before any run
// exists: the sandbox's bridge starts Argv under the full lockdown with nothing of a
// run present, and hands it the run's argv, environment, directory and deadline at
// claim (the preload protocol, api/bridgeapi; package preload has a Node.js one).
type Preload struct {
	// Argv is the preload command, started in the sandbox before the claim.
	Argv []string
	// Mounts are host directories mounted read-only from the sandbox's creation: the
	// runtime's code (a package tree, say), never a run's data. Writable is refused.
	Mounts []Mount
	// Timeout bounds the runtime's boot, until it says it is ready (default 2 min).
	Timeout time.Duration
}

// Validate checks p. Errors wrap ErrInvalidSpec.
func (p *Preload) Validate() error {
	if p == nil {
		return nil
	}
	if len(p.Argv) == 0 || p.Argv[0] == "" {
		return Invalidf("preload: no command")
	}
	for i, a := range p.Argv {
		if strings.ContainsRune(a, 0) {
			return Invalidf("preload: argv[%d] contains a NUL byte", i)
		}
	}
	if p.Timeout < 0 {
		return Invalidf("preload: negative timeout")
	}
	for i, m := range p.Mounts {
		if m.Writable {
			return Invalidf("preload mount %d: writable; a pre-booted runtime's mounts are read-only", i)
		}
	}
	return nil
}

func (p *Preload) clone() *Preload {
	if p == nil {
		return nil
	}
	c := *p
	c.Argv = slices.Clone(p.Argv)
	c.Mounts = slices.Clone(p.Mounts)
	return &c
}

// ColdSpec is s as a runner without a pre-booted sandbox runs it: Preload's mounts
// join Mounts (read-only), Preload is dropped, Argv runs as given.
func (s RunSpec) ColdSpec() RunSpec {
	if s.Preload == nil {
		return s
	}
	s.Mounts = append(slices.Clone(s.Mounts), s.Preload.Mounts...)
	s.Preload = nil
	return s
}

// StartKind says how a run's sandbox was started.
type StartKind string

// Start kinds.
const (
	// StartCold: created for the run ("" means the same).
	StartCold StartKind = "cold"
	// StartWarm: a warm pool's pre-created sandbox.
	StartWarm StartKind = "warm"
	// StartPreloaded: a warm pool's sandbox whose agent runtime was pre-booted.
	StartPreloaded StartKind = "preloaded"
)

// RunResult is the outcome of a run.
type RunResult struct {
	// ExitCode is the process's exit code; -1 when it never ran or was killed before exit.
	ExitCode int
	// Stdout and Stderr are the captured streams, each at most OutputLimit bytes.
	Stdout, Stderr []byte
	// StdoutTruncated and StderrTruncated say whether output was dropped past the cap.
	StdoutTruncated, StderrTruncated bool
	// ErrorCode is empty for a completed run (whatever its exit code).
	ErrorCode ErrorCode
	// Duration is the wall-clock time from create to exit.
	Duration time.Duration
	// Start says how the sandbox was started ("" from runners that do not say: cold).
	Start StartKind
	// StartNote says why a run that asked for a pre-booted or pooled sandbox ran cold.
	StartNote string
	// PreloadAttestation is the isolation the sandbox's bridge reported before the
	// claim, once its pre-booted runtime was ready (StartPreloaded runs only).
	PreloadAttestation *Attestation
	// Memory is what the sandbox's memory cgroup said while it ran (see
	// MemoryPressure); nil where the runner cannot read it.
	Memory *MemoryPressure
	// StdoutDropped and StderrDropped count the bytes of a session's output that came
	// before Stdout and Stderr: its output log keeps the last LogLimit bytes of each
	// stream (see docs/sessions.md). Sessions only; runs count nothing here (their
	// caps show in StdoutTruncated and StderrTruncated).
	StdoutDropped, StderrDropped int64
}

// OK reports whether the run completed and exited 0.
func (r *RunResult) OK() bool { return r != nil && r.ErrorCode == "" && r.ExitCode == 0 }

// ErrorCode classifies a run that did not complete.
type ErrorCode string

// Error codes, matching the seed's SandboxRunResult.errorCode.
const (
	CodeTimeout         ErrorCode = "timeout"
	CodeOOMKilled       ErrorCode = "oom_killed"
	CodeContainerFailed ErrorCode = "container_failed"
	CodeInternal        ErrorCode = "internal"
)

// Sentinel returns the package sentinel for the code.
func (c ErrorCode) Sentinel() error {
	switch c {
	case CodeTimeout:
		return ErrTimeout
	case CodeOOMKilled:
		return ErrOOMKilled
	case CodeContainerFailed:
		return ErrContainerFailed
	default:
		return ErrInternal
	}
}

// RunError reports a run that did not complete. errors.Is matches the code's sentinel
// (ErrTimeout, ...) and the cause (context.Canceled, say).
type RunError struct {
	Code ErrorCode
	Err  error // the cause; may be nil
}

// Error implements error.
func (e *RunError) Error() string {
	if e.Err == nil {
		return string(e.Code)
	}
	return fmt.Sprintf("%s: %v", e.Code, e.Err)
}

// Unwrap returns the code's sentinel and the cause.
func (e *RunError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Code.Sentinel()}
	}
	return []error{e.Code.Sentinel(), e.Err}
}

var (
	envKeyRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	userRe   = regexp.MustCompile(`^[0-9]{1,10}(:[0-9]{1,10})?$`)
)

// WithDefaults returns a copy of s with zero fields set to their defaults.
func (s RunSpec) WithDefaults() RunSpec {
	if s.User == "" {
		s.User = DefaultUser
	}
	if s.Limits.Timeout == 0 {
		s.Limits.Timeout = DefaultTimeout
	}
	if s.Limits.MemoryBytes == 0 {
		s.Limits.MemoryBytes = DefaultMemoryBytes
	}
	if s.Limits.PIDs == 0 {
		s.Limits.PIDs = DefaultPIDs
	}
	if s.Limits.TmpfsBytes == 0 {
		s.Limits.TmpfsBytes = DefaultTmpfsBytes
	}
	if s.Limits.OpenFiles == 0 {
		s.Limits.OpenFiles = DefaultOpenFiles
	}
	if s.OutputLimit == 0 {
		s.OutputLimit = DefaultOutputLimit
	}
	return s
}

// Validate checks a spec (after WithDefaults) without touching the runtime. Errors wrap
// ErrInvalidSpec and say which field is wrong.
func (s RunSpec) Validate() error {
	if err := ValidateRunID(s.RunID); err != nil {
		return err
	}
	if s.Image == "" || strings.ContainsAny(s.Image, " \t\r\n\x00") {
		return Invalidf("image %q is empty or has whitespace", s.Image)
	}
	for i, a := range s.Argv {
		if strings.ContainsRune(a, 0) {
			return Invalidf("argv[%d] contains a NUL byte", i)
		}
	}
	for k, v := range s.Env {
		if !envKeyRe.MatchString(k) {
			return Invalidf("env key %q is not a valid variable name", k)
		}
		if strings.ContainsRune(v, 0) {
			return Invalidf("env %s contains a NUL byte", k)
		}
	}
	if s.WorkspaceDir != "" && !path.IsAbs(s.WorkspaceDir) {
		return Invalidf("workspace dir %q is not absolute", s.WorkspaceDir)
	}
	if err := s.Preload.Validate(); err != nil {
		return err
	}
	for i, m := range s.ColdSpec().Mounts {
		if !path.IsAbs(m.Source) || !path.IsAbs(m.Target) {
			return Invalidf("mount %d: source and target must be absolute", i)
		}
		t := path.Clean(m.Target)
		if t == "/" || t == WorkspacePath || t == LLMSocketDir || strings.HasPrefix(t, "/proc") || strings.HasPrefix(t, "/sys") || strings.HasPrefix(t, "/dev") {
			return Invalidf("mount %d: target %q is reserved", i, m.Target)
		}
	}
	if !userRe.MatchString(s.User) {
		return Invalidf("user %q is not numeric uid[:gid]", s.User)
	}
	if uid, _, _ := strings.Cut(s.User, ":"); strings.TrimLeft(uid, "0") == "" {
		return Invalidf("user %q is root; sandboxes never run as root", s.User)
	}
	if s.Limits.Timeout < 0 || s.Limits.MemoryBytes < 6<<20 || s.Limits.PIDs < 1 || s.Limits.NanoCPUs < 0 || s.Limits.TmpfsBytes < 0 {
		return Invalidf("limits out of range (no negative values; memory at least 6 MiB, pids at least 1)")
	}
	if s.OutputLimit < 0 {
		return Invalidf("output limit %d is negative", s.OutputLimit)
	}
	if s.Limits.OpenFiles < 16 || s.Limits.OpenFiles > MaxOpenFiles {
		return Invalidf("open files limit %d out of range [16, %d]", s.Limits.OpenFiles, MaxOpenFiles)
	}
	if s.LLM != nil && (s.LLM.HostDir == "") == (s.LLM.Volume == "") {
		return Invalidf("llm socket: exactly one of HostDir and Volume must be set")
	}
	if s.LLM != nil && s.LLM.HostDir != "" && !path.IsAbs(s.LLM.HostDir) {
		return Invalidf("llm socket dir %q is not absolute", s.LLM.HostDir)
	}
	if s.OutputLimit < 0 {
		return Invalidf("output limit is negative")
	}
	return ValidateLabels(s.Labels)
}

// CheckHostPaths checks that the spec's host directories exist and are directories.
// Runtimes would otherwise create a missing bind source as an empty root-owned
// directory and run anyway. Errors wrap ErrInvalidSpec.
func (s RunSpec) CheckHostPaths() error {
	if s.WorkspaceDir != "" {
		if err := checkDir("workspace dir", s.WorkspaceDir); err != nil {
			return err
		}
	}
	for i, m := range s.ColdSpec().Mounts {
		if err := checkDir(fmt.Sprintf("mount %d source", i), m.Source); err != nil {
			return err
		}
	}
	if s.LLM != nil && s.LLM.HostDir != "" {
		if err := checkDir("llm socket dir", s.LLM.HostDir); err != nil {
			return err
		}
	}
	return nil
}

func checkDir(what, p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return Invalidf("%s: %v", what, err)
	}
	if !fi.IsDir() {
		return Invalidf("%s %s is not a directory", what, p)
	}
	return nil
}

// CheckBridge refuses a run with LLM access that nothing connects to its socket, given
// whether the runner has a bridge. Errors wrap ErrInvalidSpec.
func (s RunSpec) CheckBridge(runnerHasBridge bool) error {
	if s.LLM != nil && !runnerHasBridge && !s.OwnBridge {
		return Invalidf("the run has LLM access but the runner has no bridge (WithBridge, built by bridge.Build) and the spec does not say the image brings one (RunSpec.OwnBridge): the agent could not reach its proxy")
	}
	return nil
}
