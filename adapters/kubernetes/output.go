package kubernetes

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"io"
	"sync"
)

// output decodes the frames sandbox-kube-init writes to the agent container's log
// ("o <base64>", "e <base64>", "t <bool> <bool>") into the run's two streams, capped
// at limit bytes each, handing each new byte once to the live writers.
type output struct {
	mu           sync.Mutex
	limit        int
	out, err     []byte
	truncOut     bool
	truncErr     bool
	done         bool          // the "t" frame arrived: the streams are complete
	doneCh       chan struct{} // closed when done becomes true
	liveOut      io.Writer
	liveErr      io.Writer
	seenO, seenE int // bytes of each stream decoded from the current log read
}

func newOutput(limit int, stdout, stderr io.Writer) *output {
	return &output{limit: limit, liveOut: stdout, liveErr: stderr, doneCh: make(chan struct{})}
}

// read decodes a whole log, or a followed one, from its start. Bytes already taken
// from an earlier read of the same log are skipped, so a second read after a broken
// follow adds only what is new.
func (o *output) read(r io.Reader) error {
	o.mu.Lock()
	o.seenO, o.seenE = 0, 0
	o.mu.Unlock()
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' {
			o.frame(bytes.TrimSuffix(line, []byte{'\n'}))
			// The end frame is the last thing the init writes: no need to wait for
			// the kubelet to notice that the container exited.
			if line[0] == 't' && o.complete() {
				return nil
			}
		}
		if err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}

func (o *output) frame(line []byte) {
	if len(line) < 2 || line[1] != ' ' {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	switch line[0] {
	case 'o', 'e':
		b, err := base64.StdEncoding.AppendDecode(nil, line[2:])
		if err != nil {
			return
		}
		if line[0] == 'o' {
			o.seenO = o.add(b, o.seenO, &o.out, &o.truncOut, &o.liveOut)
		} else {
			o.seenE = o.add(b, o.seenE, &o.err, &o.truncErr, &o.liveErr)
		}
	case 't':
		f := bytes.Fields(line[2:])
		if len(f) == 2 {
			o.truncOut = o.truncOut || string(f[0]) == "true"
			o.truncErr = o.truncErr || string(f[1]) == "true"
			if !o.done {
				close(o.doneCh)
			}
			o.done = true
		}
	}
}

// add appends what of b (found at offset seen of the stream) is new, up to the limit.
func (o *output) add(b []byte, seen int, dst *[]byte, trunc *bool, live *io.Writer) int {
	end := seen + len(b)
	if end > len(*dst) {
		newBytes := b[max(0, len(*dst)-seen):]
		room := o.limit - len(*dst)
		if len(newBytes) > room {
			newBytes = newBytes[:max(0, room)]
			*trunc = true
		}
		*dst = append(*dst, newBytes...)
		// A writer that fails gets nothing more (port.RunSpec.Stdout).
		if *live != nil && len(newBytes) > 0 {
			if _, err := (*live).Write(newBytes); err != nil {
				*live = nil
			}
		}
	}
	return end
}

func (o *output) complete() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.done
}

func (o *output) result() (stdout, stderr []byte, truncOut, truncErr bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return bytes.Clone(o.out), bytes.Clone(o.err), o.truncOut, o.truncErr
}
