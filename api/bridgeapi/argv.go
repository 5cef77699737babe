package bridgeapi

import (
	"strconv"
	"time"
)

// The bridge's command line (cmd/sandbox-bridge): the names of its flags, without
// the leading "-", defined by the bridge with these names and written by the
// runners' builders below.
const (
	FlagListen         = "listen"          // loopback address to listen on (default LLMAddr)
	FlagSocket         = "socket"          // the LLM socket (default LLMSocketPath)
	FlagAttest         = "attest"          // post an Attestation before the command starts
	FlagNoForward      = "no-forward"      // be the command's init only: no listener
	FlagDeadline       = "deadline"        // end the command at this unix time in milliseconds
	FlagDeadlineFile   = "deadline-file"   // with -deadline: a later deadline the host may write (deadline.go)
	FlagGrace          = "grace"           // time between TERM and KILL (a time.Duration)
	FlagSubreaper      = "subreaper"       // reap orphans even when not PID 1
	FlagVerbose        = "v"               // log diagnostics to stderr
	FlagEgress         = "egress"          // also listen here as the egress proxy (EgressProxyAddr)
	FlagEgressSocket   = "egress-socket"   // the egress socket (default EgressSocketPath)
	FlagClaim          = "claim"           // a warm pool's stub: read the run (Claim) from stdin
	FlagPreload        = "preload"         // with -claim: start the command as a preloaded runtime
	FlagPreloadTimeout = "preload-timeout" // how long a preloaded runtime may take to be ready
	FlagExpose         = "expose"          // expose this loopback port as PORT.sock (repeatable)
	FlagExposeDir      = "expose-dir"      // the directory of the -expose sockets
	FlagOutputCap      = "output-cap"      // pass output through, keeping this many bytes per stream
	FlagOutputMarks    = "output-marks"    // mark each stream every this many bytes (OutputMark)
	FlagLogDir         = "log-dir"         // with -output-cap: also write the output to the session log there (SessionLogDir)
)

// Deadline slack and grace used by runners: the bridge's own deadline comes after the
// host's time limit (which normally ends the run, classified as a timeout), so it only
// acts when the host is gone.
const (
	DeadlineSlack = 2 * time.Second
	DeadlineGrace = 2 * time.Second
)

// DefaultPreloadTimeout bounds a preloaded runtime's boot before it says it is ready.
const DefaultPreloadTimeout = 2 * time.Minute

// Prefix is the command line that runs a sandbox's argv behind the bridge binary at
// path: forwarding to the LLM socket (and attesting the sandbox to its proxy first)
// when forward is true, else only as the init; ending the command at
// timeout+DeadlineSlack from now when timeout is positive.
func Prefix(path string, forward bool, timeout time.Duration, now time.Time) []string {
	p := []string{path}
	if forward {
		p = append(p, "-"+FlagAttest)
	} else {
		p = append(p, "-"+FlagNoForward)
	}
	if timeout > 0 {
		p = append(p, "-"+FlagDeadline, strconv.FormatInt(now.Add(timeout+DeadlineSlack).UnixMilli(), 10),
			"-"+FlagGrace, DeadlineGrace.String())
	}
	return append(p, "--")
}

// WithEgress adds the egress listener (EgressProxyAddr) to a command line made by
// Prefix, before its "--".
func WithEgress(prefix []string) []string {
	if len(prefix) == 0 || prefix[len(prefix)-1] != "--" {
		return prefix
	}
	out := append([]string(nil), prefix[:len(prefix)-1]...)
	return append(out, "-"+FlagEgress, EgressProxyAddr, "--")
}

// PreloadArgs is a warm pool stub's command line for a preloaded runtime started
// with argv; timeout (a time.Duration's text) bounds its boot when not empty.
func PreloadArgs(path string, argv []string, timeout string) []string {
	a := []string{path, "-" + FlagClaim, "-" + FlagPreload}
	if timeout != "" {
		a = append(a, "-"+FlagPreloadTimeout, timeout)
	}
	return append(append(a, "--"), argv...)
}

// NewClaim returns the claim for argv and env, forwarding when forward is true, with
// the bridge's deadline at timeout+DeadlineSlack from now (none when timeout is zero)
// as Prefix sets it for a sandbox started with its run.
func NewClaim(argv, env []string, dir string, forward bool, timeout time.Duration, now time.Time) Claim {
	c := Claim{Argv: argv, Env: env, Dir: dir, Forward: forward}
	if timeout > 0 {
		c.DeadlineMS = now.Add(timeout + DeadlineSlack).UnixMilli()
		c.GraceMS = DeadlineGrace.Milliseconds()
	}
	return c
}
