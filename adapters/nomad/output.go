package nomad

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/agentsandbox/sandbox/internal/capture"
	"github.com/agentsandbox/sandbox/port"
)

// collect reads the sandbox task's stdout and stderr, each capped at limit bytes (the
// prefix is kept; the flag says more was written): from the files the init wrote when
// there is one, else through Nomad's log API.
func (r *Runner) collect(ctx context.Context, alloc *api.Allocation, limit int, res *port.RunResult) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.cleanupTimeout)
	defer cancel()
	if r.cfg.initPath != "" {
		r.collectFiles(ctx, alloc, limit, res)
		return
	}
	for _, s := range []struct {
		kind  string
		out   *[]byte
		trunc *bool
	}{{"stdout", &res.Stdout, &res.StdoutTruncated}, {"stderr", &res.Stderr, &res.StderrTruncated}} {
		buf := &capture.Buffer{Max: limit}
		if err := r.readLog(ctx, alloc, s.kind, buf); err != nil {
			r.cfg.logger.Warn("reading the sandbox's output failed", "kind", s.kind, "alloc", alloc.ID, "err", err)
		}
		*s.out, *s.trunc = buf.Result()
	}
}

// readLog copies one log stream of the sandbox task into buf, stopping once buf has
// more than it keeps (the truncation is then known).
func (r *Runner) readLog(ctx context.Context, alloc *api.Allocation, kind string, buf *capture.Buffer) error {
	stop := make(chan struct{})
	defer close(stop)
	frames, errc := r.api.AllocFS().Logs(alloc, false, agentTask, kind, api.OriginStart, 0, stop, (&api.QueryOptions{}).WithContext(ctx))
	var n int
	for {
		select {
		case f, ok := <-frames:
			if !ok {
				return nil
			}
			if f == nil || f.IsHeartbeat() {
				continue
			}
			_, _ = buf.Write(f.Data)
			n += len(f.Data)
			if n > buf.Max {
				return nil
			}
		case err, ok := <-errc:
			if !ok || err == nil || err == io.EOF {
				// The frames already sent are still in their channel.
				drain(frames, buf, &n)
				return nil
			}
			if isNotFound(err) {
				return nil // the task wrote nothing
			}
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(r.cfg.cleanupTimeout):
			return fmt.Errorf("no log frame in %v", r.cfg.cleanupTimeout)
		}
	}
}

func drain(frames <-chan *api.StreamFrame, buf *capture.Buffer, n *int) {
	for {
		select {
		case f, ok := <-frames:
			if !ok {
				return
			}
			if f != nil && !f.IsHeartbeat() && *n <= buf.Max {
				_, _ = buf.Write(f.Data)
				*n += len(f.Data)
			}
		default:
			return
		}
	}
}

// collectFiles reads the init's output files through Nomad's file system API. The
// agent could have replaced them (they are in its own task directory): only regular
// files are read, so a link the agent planted cannot make the host read another file
// of the allocation. The agent is dead by then, so it cannot swap them in between.
func (r *Runner) collectFiles(ctx context.Context, alloc *api.Allocation, limit int, res *port.RunResult) {
	q := (&api.QueryOptions{}).WithContext(ctx)
	dir := agentTask + "/local"
	entries, _, err := r.api.AllocFS().List(alloc, dir, q)
	if err != nil {
		r.cfg.logger.Warn("listing the sandbox's output failed", "alloc", alloc.ID, "err", err)
		return
	}
	regular := map[string]bool{}
	for _, e := range entries {
		if !e.IsDir && strings.HasPrefix(e.FileMode, "-") {
			regular[e.Name] = true
		}
	}
	for _, s := range []struct {
		kind  string
		out   *[]byte
		trunc *bool
	}{{"stdout", &res.Stdout, &res.StdoutTruncated}, {"stderr", &res.Stderr, &res.StderrTruncated}} {
		name := strings.TrimPrefix(outputFile(s.kind), "local/")
		if !regular[name] {
			continue
		}
		b, err := readAll(r.api.AllocFS().ReadAt(alloc, dir+"/"+name, 0, int64(limit)+1, q))
		if err != nil {
			r.cfg.logger.Warn("reading the sandbox's output failed", "kind", s.kind, "alloc", alloc.ID, "err", err)
			continue
		}
		if len(b) > limit {
			b, *s.trunc = b[:limit], true
		}
		*s.out = b
	}
}
