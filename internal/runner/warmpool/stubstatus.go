package warmpool

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
)

// StubStatus reads a -preload stub's stdout before its claim: the
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
