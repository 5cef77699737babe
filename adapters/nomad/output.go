package nomad

import (
	"context"
	"errors"
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
// there is one, else through Nomad's log API. An error means the output could not be
// read whole: the run's result must not pass for one that printed nothing.
func (r *Runner) collect(ctx context.Context, alloc *api.Allocation, limit int, res *port.RunResult) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.cleanupTimeout)
	defer cancel()
	if r.cfg.initPath != "" {
		return r.collectFiles(ctx, alloc, limit, res)
	}
	var errs []error
	for _, s := range []struct {
		kind  string
		out   *[]byte
		trunc *bool
	}{{"stdout", &res.Stdout, &res.StdoutTruncated}, {"stderr", &res.Stderr, &res.StderrTruncated}} {
		buf := &capture.Buffer{Max: limit}
		if err := r.readLog(ctx, alloc, s.kind, buf); err != nil {
			errs = append(errs, fmt.Errorf("reading %s: %w", s.kind, err))
		}
		*s.out, *s.trunc = buf.Result()
	}
	return errors.Join(errs...)
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
func (r *Runner) collectFiles(ctx context.Context, alloc *api.Allocation, limit int, res *port.RunResult) error {
	dir := agentTask + "/local"
	var entries []*api.AllocFileInfo
	err := retry(ctx, func() (err error) {
		entries, _, err = r.api.AllocFS().List(alloc, dir, (&api.QueryOptions{}).WithContext(ctx))
		return err
	})
	if err != nil {
		return fmt.Errorf("listing the sandbox's output: %w", err)
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
			// The init did not start (or the agent replaced the file): nothing to read.
			continue
		}
		b, err := r.readFile(ctx, alloc, dir+"/"+name, int64(limit)+1)
		if err != nil {
			return fmt.Errorf("reading the sandbox's %s: %w", s.kind, err)
		}
		if len(b) > limit {
			b, *s.trunc = b[:limit], true
		}
		*s.out = b
	}
	return nil
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
	var b []byte
	err := retry(ctx, func() error {
		rc, err := r.api.Raw().Response("/v1/client/fs/readat/"+alloc.ID, q)
		if err != nil {
			return err
		}
		defer rc.Close()
		b, err = io.ReadAll(io.LimitReader(rc, limit))
		return err
	})
	return b, err
}

// retry runs fn up to four times while it fails with what a busy agent answers (429,
// a 5xx, a transport error), backing off from 100 ms.
func retry(ctx context.Context, fn func() error) error {
	var err error
	for i, d := 0, 100*time.Millisecond; i < 4; i, d = i+1, d*2 {
		if err = fn(); err == nil || isNotFound(err) || !transient(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(d):
		}
	}
	return err
}

func transient(err error) bool {
	st := statusOf(err)
	return st == 429 || st >= 500 || errors.Is(classify(err), port.ErrUnavailable) ||
		strings.Contains(err.Error(), "Unexpected response code: 429") || strings.Contains(err.Error(), "Unexpected response code: 5")
}
