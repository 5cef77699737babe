package nomad

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/agentsandbox/sandbox/port"
)

// liveStream follows one of the init's output files through the servers' file
// system stream endpoint and hands its bytes to a live writer, at most max of them.
type liveStream struct {
	w    io.Writer
	max  int
	mu   sync.Mutex
	n    int  // bytes handed to w
	off  bool // w failed: it gets nothing more
	done chan struct{}
}

// write hands p to the writer, capped at max bytes in all.
func (s *liveStream) write(p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.off {
		return
	}
	if room := s.max - s.n; len(p) > room {
		p = p[:max(room, 0)]
	}
	if len(p) == 0 {
		return
	}
	s.n += len(p)
	if _, err := s.w.Write(p); err != nil {
		s.off = true
	}
}

// startLive streams the sandbox's output to spec.Stdout and spec.Stderr while the run
// goes on (only the init's output files can be followed; without an init the writers
// get the output when the run ends). The returned function ends the streams and hands
// each writer what it has not had yet of the collected result, so a writer receives
// exactly the bytes the result keeps.
func (r *Runner) startLive(ctx context.Context, allocID string, spec port.RunSpec) func(res *port.RunResult) {
	if spec.Stdout == nil && spec.Stderr == nil {
		return func(*port.RunResult) {}
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	streams := map[string]*liveStream{}
	for kind, w := range map[string]io.Writer{"stdout": spec.Stdout, "stderr": spec.Stderr} {
		if w == nil {
			continue
		}
		s := &liveStream{w: w, max: spec.OutputLimit, done: make(chan struct{})}
		streams[kind] = s
		if r.cfg.initPath == "" || allocID == "" {
			close(s.done)
			continue
		}
		go func() {
			defer close(s.done)
			r.follow(ctx, allocID, agentTask+"/"+outputFile(kind), s)
		}()
	}
	return func(res *port.RunResult) {
		cancel()
		for kind, s := range streams {
			<-s.done
			if res == nil {
				continue
			}
			out := res.Stdout
			if kind == "stderr" {
				out = res.Stderr
			}
			s.mu.Lock()
			n := s.n
			s.mu.Unlock()
			if n < len(out) {
				s.write(out[n:])
			}
		}
	}
}

// follow streams the file at p into s until ctx ends, reconnecting from the last
// offset while the file does not exist yet or the stream breaks.
func (r *Runner) follow(ctx context.Context, allocID, p string, s *liveStream) {
	for ctx.Err() == nil {
		s.mu.Lock()
		off, full := s.n, s.off || s.n >= s.max
		s.mu.Unlock()
		if full {
			return
		}
		// The file is in the agent's own task directory: follow it only while it is a
		// regular file, so a link the agent planted cannot point the host's writer at
		// another file of the allocation (as collectFiles checks for the result).
		var fi api.AllocFileInfo
		sq := (&api.QueryOptions{Params: map[string]string{"path": p}}).WithContext(ctx)
		_, serr := r.api.Raw().Query("/v1/client/fs/stat/"+allocID, &fi, sq)
		q := (&api.QueryOptions{Params: map[string]string{
			"path": p, "offset": strconv.Itoa(off), "origin": api.OriginStart,
		}}).WithContext(ctx)
		regular := serr == nil && !fi.IsDir && strings.HasPrefix(fi.FileMode, "-")
		if rc, err := r.followOnce(regular, allocID, q); err == nil {
			dec := json.NewDecoder(rc)
			for {
				var f api.StreamFrame
				if err := dec.Decode(&f); err != nil {
					break
				}
				if len(f.Data) > 0 {
					s.write(f.Data)
				}
			}
			_ = rc.Close()
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// followOnce opens the stream of a file that is regular; otherwise (not there yet, or
// not a regular file) the caller looks again shortly.
func (r *Runner) followOnce(regular bool, allocID string, q *api.QueryOptions) (io.ReadCloser, error) {
	if !regular {
		return nil, errNotRegular
	}
	return r.api.Raw().Response("/v1/client/fs/stream/"+allocID, q)
}

var errNotRegular = errors.New("not a regular file")
