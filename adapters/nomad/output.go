package nomad

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/agentsandbox/sandbox/internal/capture"
	"github.com/agentsandbox/sandbox/port"
)

// collect reads the sandbox task's stdout and stderr through Nomad's log API, each
// capped at limit bytes (the prefix is kept; the flag says more was written).
func (r *Runner) collect(ctx context.Context, alloc *api.Allocation, limit int, res *port.RunResult) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.cleanupTimeout)
	defer cancel()
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
