package nomad

import (
	"context"
	"encoding/json"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/agentsandbox/sandbox/port"
)

// liveStream follows one of the sandbox task's streams through the servers' log
// endpoint and hands its bytes to a live writer, at most max of them.
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
// goes on (with the init; without it the writers get the output when the run ends).
// The returned function ends the streams and hands each writer what it has not had
// yet of the collected result, so a writer receives exactly the bytes the result
// keeps.
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
			r.follow(ctx, allocID, kind, s)
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

// follow streams one of the sandbox task's streams (kind) into s through the
// servers' log endpoint until ctx ends, reconnecting from the last offset while the
// stream breaks. Nomad writes these files; the sandbox cannot reach them.
// The stream carries the init's frames: off counts the whole lines consumed, from
// which a broken stream resumes.
func (r *Runner) follow(ctx context.Context, allocID, kind string, s *liveStream) {
	off := 0
	for ctx.Err() == nil {
		s.mu.Lock()
		full := s.off || s.n >= s.max
		s.mu.Unlock()
		if full {
			return
		}
		q := (&api.QueryOptions{Params: map[string]string{
			"task": agentTask, "type": kind, "follow": "true", "offset": strconv.Itoa(off), "origin": api.OriginStart,
		}}).WithContext(ctx)
		if rc, err := r.api.Raw().Response("/v1/client/fs/logs/"+allocID, q); err == nil {
			jd := json.NewDecoder(rc)
			var pending []byte
			for {
				var f api.StreamFrame
				if err := jd.Decode(&f); err != nil {
					break
				}
				if len(f.Data) == 0 {
					continue
				}
				pending = append(pending, f.Data...)
				dec, rest := unframe(pending)
				off += len(pending) - len(rest)
				pending = append([]byte(nil), rest...)
				if len(dec) > 0 {
					s.write(dec)
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
