package sandbox

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/agentsandbox/sandbox/port"
)

// chunkReader hands out fixed chunks, then io.EOF.
type chunkReader struct {
	chunks []port.LogChunk
	closed bool
}

func (r *chunkReader) Next(context.Context) (port.LogChunk, error) {
	if len(r.chunks) == 0 {
		return port.LogChunk{}, io.EOF
	}
	c := r.chunks[0]
	r.chunks = r.chunks[1:]
	return c, nil
}
func (r *chunkReader) Position() port.LogPosition { return port.LogPosition{} }
func (r *chunkReader) Close() error               { r.closed = true; return nil }

type followSession struct {
	fakeSession
	r *chunkReader
}

func (s *followSession) Follow(context.Context, port.FollowOptions) (port.LogReader, error) {
	return s.r, nil
}
func (s *followSession) LogSnapshot() (port.LogSnapshot, error) { return port.LogSnapshot{}, nil }

// TestCopyLogs: each stream goes to its writer, a nil writer drops its stream, the
// bytes the log no longer held are counted, and the reader is closed.
func TestCopyLogs(t *testing.T) {
	r := &chunkReader{chunks: []port.LogChunk{
		{Stream: port.LogStdout, Data: []byte("a"), Dropped: 3},
		{Stream: port.LogStderr, Data: []byte("e"), Dropped: 1},
		{Stream: port.LogStdout, Data: []byte("b")},
	}}
	ss := &Session{req: SessionRequest{Request: Request{RunID: "r1"}}, sess: &followSession{r: r}}
	fr, err := ss.Follow(context.Background(), port.FollowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	dropped, err := CopyLogs(context.Background(), fr, &out, nil)
	if err != nil || out.String() != "ab" || dropped != (port.LogPosition{Stdout: 3, Stderr: 1}) || !r.closed {
		t.Errorf("CopyLogs: %q %+v %v closed=%v", out.String(), dropped, err, r.closed)
	}
	plain := &Session{req: SessionRequest{Request: Request{RunID: "r2"}}, sess: &fakeSession{}}
	if _, err := plain.Follow(context.Background(), port.FollowOptions{}); !errors.Is(err, port.ErrUnsupported) {
		t.Errorf("Follow without a log: %v", err)
	}
}
