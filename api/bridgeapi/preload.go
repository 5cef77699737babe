package bridgeapi

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// The preload protocol, version 1: how a pooled bridge stub (sandbox-bridge -claim
// -preload -- COMMAND...) pre-boots an agent runtime before any run exists, and hands
// it the run at claim. A runtime in any language implements the preloaded side
// (PreloadFDEnv names its end of the control channel):
//
//  1. The bridge starts COMMAND before the claim with the sandbox's own environment
//     (the image's and the pool template's, nothing of any run) plus PreloadFDEnv,
//     working directory "/", stdin /dev/null, stdout and stderr pipes read by the
//     bridge, under the sandbox's full lockdown (no network, no LLM socket, no
//     workspace: they are attached at claim). The control channel is a connected
//     unix stream socket at the descriptor PreloadFDEnv names (3).
//  2. The runtime loads what does not depend on the run, then writes one line on the
//     control channel: PreloadReady ({"ready":true}). It must write nothing on
//     stdout before the claim: a byte there, an exit, or no PreloadReady within the
//     bridge's -preload-timeout makes the slot unusable (the bridge kills it and
//     exits; the pool discards the slot and makes another).
//  3. At claim the bridge writes one line on the control channel: a PreloadClaim
//     (argv, whole environment, working directory, deadline), then shuts its
//     writing side. The runtime replaces its environment with Env, changes to Dir,
//     and answers one line: PreloadStarted ({"started":true}) when it runs Argv, or
//     a PreloadError when it cannot (Code "entry_not_found" with the missing Entry:
//     the host reports a typed error naming it). It then closes the channel.
//  4. From then on its stdout and stderr are the run's, and its exit code is the
//     run's. The bridge enforces the deadline (SIGTERM, SIGKILL after the grace) and
//     reports OOM kills as for any command.
//
// The bridge tells its host the outcome of step 2 with one line on its own stdout,
// before the claim and before any output of a run: a PreloadStatus.
const (
	// PreloadFDEnv is the environment variable holding the control channel's file
	// descriptor number in the preloaded process.
	PreloadFDEnv = "AGENTSANDBOX_PRELOAD_FD"
	// PreloadFD is the descriptor the bridge gives the control channel.
	PreloadFD = 3
	// PreloadProtocol is this protocol's version.
	PreloadProtocol = 1
	// PreloadErrEntryNotFound: the claim's entrypoint does not exist in the
	// preloaded runtime.
	PreloadErrEntryNotFound = "entry_not_found"
	// PreloadErrUnsupported: the runtime cannot run this argv (another program).
	PreloadErrUnsupported = "unsupported"
	// PreloadGone starts the bridge's stderr line (exit code 125) when a claim found
	// its preloaded runtime gone: nothing of the run ran, so the host may run it
	// cold elsewhere.
	PreloadGone = "sandbox-bridge: preload gone: "
)

// PreloadReady is the runtime's line when it is ready for a claim.
type PreloadReady struct {
	Ready bool `json:"ready"`
	// Protocol is the version the runtime speaks (PreloadProtocol; 0 means 1).
	Protocol int `json:"protocol,omitempty"`
}

// PreloadClaim is the bridge's line to the runtime at claim.
type PreloadClaim struct {
	Argv       []string `json:"argv"`
	Env        []string `json:"env"`
	Dir        string   `json:"dir,omitempty"`
	DeadlineMS int64    `json:"deadline_ms,omitempty"`
}

// PreloadAnswer is the runtime's line after a claim: Started, or an Error.
type PreloadAnswer struct {
	Started bool          `json:"started,omitempty"`
	Error   *PreloadError `json:"error,omitempty"`
}

// PreloadError is a claim the runtime refused.
type PreloadError struct {
	// Code is PreloadErrEntryNotFound, PreloadErrUnsupported or another word.
	Code string `json:"code"`
	// Entry is the entrypoint the claim named (a path or a module).
	Entry string `json:"entry,omitempty"`
	// Message says more, for people.
	Message string `json:"message,omitempty"`
}

func (e *PreloadError) Error() string {
	s := "preloaded runtime refused the run: " + e.Code
	if e.Entry != "" {
		s += ": " + e.Entry
	}
	if e.Message != "" {
		s += " (" + e.Message + ")"
	}
	return s
}

// PreloadStatus is the bridge stub's one line on its stdout before a claim, when it
// was started with -preload.
type PreloadStatus struct {
	// Preload is "ready" or "failed".
	Preload string `json:"preload"`
	// Reason says why it failed.
	Reason string `json:"reason,omitempty"`
	// Attestation is the sandbox's isolation as the bridge saw it once the runtime
	// was ready, before any claim.
	Attestation *Attestation `json:"attestation,omitempty"`
	// BootMS is how long the runtime took to be ready.
	BootMS int64 `json:"boot_ms,omitempty"`
}

// Preload status words.
const (
	PreloadStatusReady  = "ready"
	PreloadStatusFailed = "failed"
)

// MaxPreloadLine bounds a line of the preload protocol (a claim is bounded by
// MaxClaimBytes).
const MaxPreloadLine = MaxClaimBytes + 64<<10

// ErrBadPreloadLine reports a line of the preload protocol that does not parse.
var ErrBadPreloadLine = errors.New("bridge: bad preload protocol line")

// WriteLine writes v as one JSON line.
func WriteLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// ReadLine reads one JSON line from r into v. Errors wrap ErrBadPreloadLine, or are
// io.EOF when r ended before any byte.
func ReadLine(r *bufio.Reader, v any) error {
	line, err := r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, io.EOF) && len(line) == 0 {
			return io.EOF
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			return fmt.Errorf("%w: longer than %d bytes", ErrBadPreloadLine, r.Size())
		}
		return fmt.Errorf("%w: %v", ErrBadPreloadLine, err)
	}
	if err := json.Unmarshal(line, v); err != nil {
		return fmt.Errorf("%w: %v", ErrBadPreloadLine, err)
	}
	return nil
}
