package identity

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// The audit journal makes a completed call's record durable with one append
// (a single write(2) of one line) instead of a SQLite transaction per call: once
// the write returns the line is in the kernel's page cache and survives the
// daemon's death. A flusher moves the lines into SQLite in batches (every
// JournalFlushInterval) and starts a new journal file; Open replays what a
// crash left, each record once (its rid is unique in the table).

// JournalFlushInterval is how often journaled records are moved into SQLite.
const JournalFlushInterval = 250 * time.Millisecond

type journalLine struct {
	RID   string `json:"rid"`
	RegID string `json:"reg"`
	Usage Usage  `json:"usage"`
	// UsageOnly marks a line that carries usage and no record: a call counted
	// before it is forwarded (AppendUsage).
	UsageOnly bool             `json:"usage_only,omitempty"`
	Record    port.AuditRecord `json:"record"`
}

type journal struct {
	path string

	mu      sync.Mutex // f, pending, rid counter
	f       *os.File
	pending []journalLine
	prefix  string
	n       uint64

	flushMu sync.Mutex // one mover at a time; Remove and GC take it too
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
}

func openJournal(path string) (*journal, error) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	j := &journal{path: path, prefix: hex.EncodeToString(b[:]), kick: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("registry: journal: %w", err)
	}
	j.f = f
	return j, nil
}

// append writes one line and queues it for the database; rec nil is a usage-only line.
func (j *journal) append(regID string, rec *port.AuditRecord, u Usage) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return ErrClosed
	}
	j.n++
	l := journalLine{RID: fmt.Sprintf("%s-%d", j.prefix, j.n), RegID: regID, Usage: u, UsageOnly: rec == nil}
	if rec != nil {
		l.Record = *rec
	}
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	if _, err := j.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("registry: journal: %w", err)
	}
	j.pending = append(j.pending, l)
	if len(j.pending) == 1024 {
		select {
		case j.kick <- struct{}{}:
		default:
		}
	}
	return nil
}

// readJournal returns the lines of a journal file. Only a torn last line (one
// without its newline: the write that died) is skipped; any other line that
// does not decode is corruption, an error wrapping ErrCorrupt that names it, as
// silently dropping it would lose a call's record and undercount its run.
func readJournal(path string) ([]journalLine, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []journalLine
	rd := bufio.NewReaderSize(f, 64<<10)
	for n := 1; ; n++ {
		b, err := rd.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A line longer than the buffer: gather it whole.
			full := append([]byte(nil), b...)
			for errors.Is(err, bufio.ErrBufferFull) {
				b, err = rd.ReadSlice('\n')
				full = append(full, b...)
			}
			b = full
		}
		if errors.Is(err, io.EOF) {
			// The last line: complete only with its newline. Without one it is the
			// write a crash cut short, skipped.
			return out, nil
		}
		if err != nil {
			return out, err
		}
		var l journalLine
		if err := json.Unmarshal(b, &l); err != nil || l.RID == "" || l.RegID == "" {
			return nil, fmt.Errorf("%w: journal %s: line %d is not a journal record (only a torn last line may be skipped)", ErrCorrupt, path, n)
		}
		out = append(out, l)
	}
}

// flushAudit moves the journaled records into SQLite: the current file is
// renamed aside and a new one started, the batch committed, then the old file
// removed. Callers hold j.flushMu.
func (r *Registry) flushAudit(ctx context.Context) error {
	j := r.j
	j.mu.Lock()
	batch := j.pending
	j.pending = nil
	if len(batch) > 0 && j.f != nil {
		old := j.path + ".old"
		if _, err := os.Stat(old); err == nil {
			// A previous move failed after its rename: keep appending here.
			j.mu.Unlock()
			return r.commitLines(ctx, batch, "")
		}
		if err := os.Rename(j.path, old); err != nil {
			j.pending = append(batch, j.pending...)
			j.mu.Unlock()
			return fmt.Errorf("registry: journal: %w", err)
		}
		nf, err := os.OpenFile(j.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			_ = os.Rename(old, j.path)
			j.pending = append(batch, j.pending...)
			j.mu.Unlock()
			return fmt.Errorf("registry: journal: %w", err)
		}
		j.f.Close()
		j.f = nf
		j.mu.Unlock()
		return r.commitLines(ctx, batch, old)
	}
	j.mu.Unlock()
	return nil
}

// commitLines inserts journal lines (each once) and usage in one transaction,
// then removes the file they came from.
func (r *Registry) commitLines(ctx context.Context, lines []journalLine, file string) error {
	if len(lines) > 0 {
		tx, err := r.db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("registry: audit: %w", err)
		}
		defer tx.Rollback()
		ins, upd := tx.StmtContext(ctx, r.insAudit), tx.StmtContext(ctx, r.updUsage)
		for _, l := range lines {
			if !l.UsageOnly {
				b, err := json.Marshal(l.Record)
				if err != nil {
					return err
				}
				if _, err := ins.ExecContext(ctx, l.RegID, l.RID, b, l.RegID); err != nil {
					return fmt.Errorf("registry: audit: %w", err)
				}
			}
			if _, err := upd.ExecContext(ctx, l.Usage.Calls, l.Usage.Tokens, l.RegID); err != nil {
				return fmt.Errorf("registry: audit: %w", err)
			}
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("registry: audit: %w", err)
		}
	}
	if file != "" {
		if err := os.Remove(file); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("registry: journal: %w", err)
		}
	}
	return nil
}

// replay moves what a crash left in the journal files into SQLite.
func (r *Registry) replay(ctx context.Context) error {
	for _, p := range []string{r.j.path + ".old", r.j.path} {
		lines, err := readJournal(p)
		if err != nil {
			return fmt.Errorf("registry: journal %s: %w", p, err)
		}
		if err := r.commitLines(ctx, lines, ""); err != nil {
			return err
		}
	}
	// Both files are in the database now; start empty.
	_ = os.Remove(r.j.path + ".old")
	return r.j.f.Truncate(0)
}

// mover flushes the journal periodically until stop.
func (r *Registry) mover() {
	defer close(r.j.done)
	t := time.NewTicker(JournalFlushInterval)
	defer t.Stop()
	for {
		select {
		case <-r.j.stop:
			return
		case <-t.C:
		case <-r.j.kick:
		}
		r.j.flushMu.Lock()
		if err := r.flushAudit(context.Background()); err != nil {
			r.moverErr.Store(err.Error())
		}
		r.j.flushMu.Unlock()
	}
}
