package nomad

import (
	"context"
	"fmt"
	"io"
	"strconv"
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
		b, err := r.readFile(ctx, alloc, dir+"/"+name, int64(limit)+1)
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

// readFile reads up to limit bytes of a file of the allocation through the servers'
// file system endpoint. The API client's own ReadAt and Cat dial the node directly
// with a new HTTP transport per call, whose idle connections pile up until Nomad's
// per-client connection limit (100) refuses further calls; through the servers the
// runner's one connection pool is reused, and nodes need not be reachable from the
// host.
func (r *Runner) readFile(ctx context.Context, alloc *api.Allocation, p string, limit int64) ([]byte, error) {
	q := (&api.QueryOptions{Params: map[string]string{
		"path": p, "offset": "0", "limit": strconv.FormatInt(limit, 10),
	}}).WithContext(ctx)
	rc, err := r.api.Raw().Response("/v1/client/fs/readat/"+alloc.ID, q)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(io.LimitReader(rc, limit))
}
