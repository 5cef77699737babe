package sandboxbridge

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
)

// StubStatus reads a -preload stub's stdout before its claim (the host side): the
// first line is a bridgeapi.PreloadStatus, delivered once on Done; anything after it
// before the claim is dropped (the stub writes nothing else).
type StubStatus struct {
	mu   sync.Mutex
	buf  []byte
	done bool
	c    chan bridgeapi.PreloadStatus
}

// NewStubStatus returns an empty StubStatus.
func NewStubStatus() *StubStatus { return &StubStatus{c: make(chan bridgeapi.PreloadStatus, 1)} }

// Done delivers the status line once it arrived (a malformed one as failed).
func (s *StubStatus) Done() <-chan bridgeapi.PreloadStatus { return s.c }

// Write implements io.Writer.
func (s *StubStatus) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return len(b), nil
	}
	s.buf = append(s.buf, b...)
	i := bytes.IndexByte(s.buf, '\n')
	if i < 0 {
		if len(s.buf) > bridgeapi.MaxPreloadLine {
			s.finish(bridgeapi.PreloadStatus{Preload: bridgeapi.PreloadStatusFailed, Reason: "the stub's status line is too long"})
		}
		return len(b), nil
	}
	var st bridgeapi.PreloadStatus
	if err := json.Unmarshal(s.buf[:i], &st); err != nil || (st.Preload != bridgeapi.PreloadStatusReady && st.Preload != bridgeapi.PreloadStatusFailed) {
		st = bridgeapi.PreloadStatus{Preload: bridgeapi.PreloadStatusFailed, Reason: fmt.Sprintf("the stub's status line is not a preload status: %.200q", s.buf[:i])}
	}
	s.finish(st)
	return len(b), nil
}

func (s *StubStatus) finish(st bridgeapi.PreloadStatus) {
	s.done = true
	s.buf = nil
	s.c <- st
}

// PreloadGoneIn reports whether tail (the end of a stub's stderr) says its preloaded
// runtime was gone at the claim: nothing of the run ran.
func PreloadGoneIn(tail []byte) (string, bool) {
	s := string(bytes.TrimSuffix(tail, []byte{'\n'}))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return strings.CutPrefix(s, bridgeapi.PreloadGone)
}

// MissingEntry returns the entrypoint an ExecFailure reason says the preloaded
// runtime did not have ("bridge: command not found: ENTRY: ...").
func MissingEntry(reason string) (string, bool) {
	rest, ok := strings.CutPrefix(reason, ErrCommandNotFound.Error()+": ")
	if !ok {
		return "", false
	}
	entry, _, _ := strings.Cut(rest, ": ")
	return entry, entry != ""
}

// PreloadArgs is the stub's command line for a preloaded runtime.
func PreloadArgs(path string, argv []string, timeout string) []string {
	a := []string{path, "-claim", "-preload"}
	if timeout != "" {
		a = append(a, "-preload-timeout", timeout)
	}
	return append(append(a, "--"), argv...)
}
