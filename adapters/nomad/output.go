package nomad

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/agentsandbox/sandbox/port"
)

// collect reads the sandbox task's stdout and stderr, each capped at limit bytes (the
// prefix is kept; the flag says more was written), through Nomad's log API. With the
// init, the streams were capped on the node and held back until Nomad had stored
// them; without it, Nomad may have missed the last output. An error means the output
// could not be read whole: the run's result must not pass for one that printed
// nothing. With exportMax > 0 (a copied workspace), stderr also carries the
// workspace's archive after the output: it is returned, with exportErr when it did
// not come back whole.
func (r *Runner) collect(ctx context.Context, alloc *api.Allocation, limit int, exportMax int64, res *port.RunResult) (archive []byte, exportErr error, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.cleanupTimeout)
	defer cancel()
	var errs []error
	for _, s := range []struct {
		kind  string
		out   *[]byte
		trunc *bool
	}{{"stdout", &res.Stdout, &res.StdoutTruncated}, {"stderr", &res.Stderr, &res.StderrTruncated}} {
		var b []byte
		var err error
		if r.cfg.initPath != "" {
			// Frames: limit+1 bytes take at most framedSize(limit+1) of them.
			max := framedSize(int64(limit) + 1)
			export := exportMax > 0 && s.kind == "stderr"
			if export {
				max += initSlack + exportFramedSize(exportMax)
			}
			b, err = r.readLog(ctx, alloc.ID, s.kind, max)
			if export {
				b, archive, exportErr = splitExport(b)
			}
			dec, rest := unframe(b)
			b = append(dec, rest...)
		} else {
			b, err = r.readLog(ctx, alloc.ID, s.kind, int64(limit)+1)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("reading the sandbox's %s: %w", s.kind, err))
		}
		if len(b) > limit {
			b, *s.trunc = b[:limit], true
		}
		*s.out = b
	}
	return archive, exportErr, errors.Join(errs...)
}

// framedSize bounds the frames (cmd/sandbox-nomad-init) that carry n bytes: a frame of
// k bytes is a line of 4*ceil(k/3)+1 <= 5k bytes.
func framedSize(n int64) int64 { return 5 * n }

// unframe decodes the init's frames in b (lines of base64, each a piece of the
// stream): what they carry, and the bytes after the last newline (a line not ended
// yet). A line that is no frame (something else wrote it: a crash of the init)
// passes as it is, newline included; the init's export frames ('!' lines: a copied
// workspace) are left out.
func unframe(b []byte) (dec, rest []byte) {
	for {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return dec, b
		}
		buf := make([]byte, base64.StdEncoding.DecodedLen(i))
		if i > 0 && b[0] == '!' {
			// An export frame: not output.
		} else if n, err := base64.StdEncoding.Decode(buf, b[:i]); err == nil {
			dec = append(dec, buf[:n]...)
		} else {
			dec = append(dec, b[:i+1]...)
		}
		b = b[i+1:]
	}
}

// readLog reads up to limit bytes from the start of one of the sandbox task's
// streams through the servers' log endpoint (plain: the bytes as stored), for the
// reasons readFile gives. A stream never written is empty.
func (r *Runner) readLog(ctx context.Context, allocID, kind string, limit int64) ([]byte, error) {
	q := (&api.QueryOptions{Params: map[string]string{
		"task": agentTask, "type": kind, "origin": api.OriginStart, "offset": "0", "plain": "true", "follow": "false",
	}}).WithContext(ctx)
	var b []byte
	err := retry(ctx, func() error {
		rc, err := r.api.Raw().Response("/v1/client/fs/logs/"+allocID, q)
		if err != nil {
			return err
		}
		defer rc.Close()
		b, err = io.ReadAll(io.LimitReader(rc, limit))
		return err
	})
	if isNotFound(err) {
		return nil, nil
	}
	return b, err
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
