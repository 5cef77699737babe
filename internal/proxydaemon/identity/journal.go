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
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// The audit journal makes a call's lines durable with one append each (a single
// write(2) of one line) instead of a SQLite transaction per call: once the write
// returns the line is in the kernel's page cache and survives the daemon's death. A
// flusher moves the lines into SQLite in batches (every JournalFlushInterval) and
// starts a new journal file; Open replays what a crash left, each line once (its rid
// is unique).
//
// Every call forwarded upstream has two lines: its admission, written before it is
// forwarded (the run's usage with the call counted, the tokens reserved for it, and
// what is known of the call), and its record once it ended, which settles the
// admission. A call whose admission cannot be written is refused (ErrNoSpace): the
// daemon never forwards a call it could not account for. An admission never settled
// belongs to a call the daemon's death cut short; the next Open records it as such
// and charges its reservation, so a crash neither loses a forwarded call from the
// audit nor lets a run spend past its budget.
//
// A full disk: a write that fails is cut back to the last whole line (never a torn
// line mid-journal), and the ballast (a file of reserved space beside the journal)
// is given up, so the records of calls in flight and the database's commits have
// room; admissions are refused until the ballast can be made again. A record the
// journal cannot take is kept in memory and moved into the database with the rest:
// it is never dropped.

// JournalFlushInterval is how often journaled lines are moved into SQLite.
const JournalFlushInterval = 250 * time.Millisecond

// DefaultJournalReserve is Config.JournalReserve's default.
const DefaultJournalReserve = 4 << 20

// ErrNoSpace reports a call the registry could not record (its file system is full):
// the caller must not forward it.
var ErrNoSpace = errors.New("registry: no space to record the call")

// ErrJournalCorrupt reports an audit journal with a damaged line (not a torn last
// one). The database is not affected; see Config.SalvageJournal.
var ErrJournalCorrupt = errors.New("registry: the audit journal has a damaged line")

type journalLine struct {
	RID   string `json:"rid"`
	RegID string `json:"reg"`
	Usage Usage  `json:"usage"`
	// UsageOnly marks a line that carries no audit record: an admission, or a
	// settlement without a record.
	UsageOnly bool `json:"usage_only,omitempty"`
	// Admit marks a call's admission (the line's rid is the call's ticket).
	Admit *admission `json:"admit,omitempty"`
	// Settles is the ticket of the admission this line ends.
	Settles string           `json:"settles,omitempty"`
	Record  port.AuditRecord `json:"record"`
}

// admission is what an admission line says beyond its usage (its Record is what is
// known of the call when it is forwarded).
type admission struct {
	// Tokens is what the call reserved from the run's token budget.
	Tokens int64 `json:"tokens,omitempty"`
}

type journal struct {
	path    string
	ballast ballast

	mu      sync.Mutex // f, size, pending, retry, ballast, rid counter
	f       *os.File
	size    int64         // bytes of whole lines in f
	pending []journalLine // lines since the last rotation, written to f or not
	// unwritten counts pending lines f could not take (disk full): only memory
	// holds them until the database does.
	unwritten int
	// retry is a batch whose commit failed, committed again before the next
	// rotation (its file is the .old one).
	retry  []journalLine
	prefix string
	n      uint64

	flushMu sync.Mutex // one mover at a time; Remove and GC take it too
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
}

func openJournal(path string, reserve int64) (*journal, error) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	j := &journal{path: path, prefix: hex.EncodeToString(b[:]), kick: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}), ballast: ballast{path: path + ".reserve", size: reserve}}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("registry: journal: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("registry: journal: %w", err)
	}
	j.f, j.size = f, fi.Size()
	j.ballast.restore() // a disk already full: admissions wait for space
	return j, nil
}

// append writes one line and queues it for the database. An admission (admit set)
// that cannot be written is refused (ErrNoSpace, nothing queued); any other line is
// queued whatever happens to the write, so a record is never dropped. It returns the
// line's rid.
func (j *journal) append(regID string, rec *port.AuditRecord, u Usage, admit *admission, settles string) (string, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil {
		return "", ErrClosed
	}
	if admit != nil && !j.ballast.restore() {
		return "", fmt.Errorf("%w: its file system is full (no room for the reserve %s)", ErrNoSpace, j.ballast.path)
	}
	j.n++
	l := journalLine{RID: fmt.Sprintf("%s-%d", j.prefix, j.n), RegID: regID, Usage: u, UsageOnly: rec == nil, Admit: admit, Settles: settles}
	if rec != nil {
		l.Record = *rec
	}
	b, err := json.Marshal(l)
	if err != nil {
		return "", err
	}
	if err := j.write(append(b, '\n'), admit == nil); err != nil {
		if admit != nil {
			return "", fmt.Errorf("%w: %w", ErrNoSpace, err)
		}
		j.unwritten++ // kept for the database: memory holds it meanwhile
	}
	j.pending = append(j.pending, l)
	if len(j.pending) == 1024 {
		select {
		case j.kick <- struct{}{}:
		default:
		}
	}
	return l.RID, nil
}

// write appends one whole line to f, or nothing: a short write is cut back to the
// last whole line. A full disk gives up the ballast; retry then writes once more
// into the room it left (a record of a call in flight, not an admission).
func (j *journal) write(b []byte, retry bool) error {
	for {
		n, err := j.f.Write(b)
		if err == nil {
			j.size += int64(n)
			return nil
		}
		if n > 0 {
			if terr := j.f.Truncate(j.size); terr != nil {
				return fmt.Errorf("registry: journal: a short write could not be cut back: %w (after %w)", terr, err)
			}
		}
		if !errors.Is(err, syscall.ENOSPC) && !errors.Is(err, syscall.EDQUOT) {
			return fmt.Errorf("registry: journal: %w", err)
		}
		freed := j.ballast.release()
		if !retry || !freed {
			return fmt.Errorf("registry: journal: %w", err)
		}
		retry = false
	}
}

// readJournal returns the lines of a journal file. Only a torn last line (one
// without its newline: the write a crash cut) is skipped. Any other line that does
// not decode is damage: without salvage, an error wrapping ErrJournalCorrupt that
// names it (silently dropping it would lose a call's record); with salvage, the
// damaged lines are returned apart (to be kept aside) and the rest read.
func readJournal(path string, salvage bool) (lines []journalLine, damaged [][]byte, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
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
			return lines, damaged, nil
		}
		if err != nil {
			return lines, damaged, err
		}
		var l journalLine
		if err := json.Unmarshal(b, &l); err != nil || l.RID == "" || l.RegID == "" {
			if salvage {
				damaged = append(damaged, append([]byte(nil), b...))
				continue
			}
			return nil, nil, fmt.Errorf("%w: %s line %d is not a journal record (only a torn last line may be skipped)", ErrJournalCorrupt, path, n)
		}
		lines = append(lines, l)
	}
}

// flushAudit moves the journaled lines into SQLite: a batch that failed before is
// committed first; then the current file is renamed aside and a new one started, the
// batch committed, and the old file removed. Callers hold j.flushMu.
func (r *Registry) flushAudit(ctx context.Context) error {
	j := r.j
	j.mu.Lock()
	if j.retry != nil {
		// The last move renamed its file and failed to commit: that batch goes in
		// before another file is renamed aside.
		batch := j.retry
		j.mu.Unlock()
		if err := r.commitLines(ctx, batch, j.path+".old"); err != nil {
			return err
		}
		j.mu.Lock()
		j.retry = nil
	}
	batch := j.pending
	if len(batch) == 0 || j.f == nil {
		j.ballast.restore()
		j.mu.Unlock()
		return nil
	}
	old := j.path + ".old"
	if err := os.Rename(j.path, old); err != nil {
		j.mu.Unlock()
		return fmt.Errorf("registry: journal: %w", err)
	}
	nf, err := os.OpenFile(j.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		_ = os.Rename(old, j.path)
		j.mu.Unlock()
		return fmt.Errorf("registry: journal: %w", err)
	}
	j.f.Close()
	j.f, j.size, j.pending, j.unwritten = nf, 0, nil, 0
	j.mu.Unlock()
	if err := r.commitLines(ctx, batch, old); err != nil {
		j.mu.Lock()
		j.retry = batch
		j.mu.Unlock()
		return err
	}
	j.mu.Lock()
	j.ballast.restore() // space the old file held is free again
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
		admit, settle := tx.StmtContext(ctx, r.insInflight), tx.StmtContext(ctx, r.delInflight)
		for _, l := range lines {
			if l.Admit != nil {
				b, err := json.Marshal(l.Record)
				if err != nil {
					return err
				}
				if _, err := admit.ExecContext(ctx, l.RID, l.RegID, l.Admit.Tokens, b, l.RegID); err != nil {
					return fmt.Errorf("registry: audit: %w", err)
				}
			} else if !l.UsageOnly {
				b, err := json.Marshal(l.Record)
				if err != nil {
					return err
				}
				if _, err := ins.ExecContext(ctx, l.RegID, l.RID, b, l.RegID); err != nil {
					return fmt.Errorf("registry: audit: %w", err)
				}
			}
			if l.Settles != "" {
				if _, err := settle.ExecContext(ctx, l.Settles); err != nil {
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

// replay moves what a crash left in the journal files into SQLite, then records the
// calls it cut (cutCalls).
func (r *Registry) replay(ctx context.Context, salvage bool) error {
	for _, p := range []string{r.j.path + ".old", r.j.path} {
		lines, damaged, err := readJournal(p, salvage)
		if err != nil {
			return err
		}
		if len(damaged) > 0 {
			aside := fmt.Sprintf("%s.damaged-%d", p, time.Now().Unix())
			if err := os.WriteFile(aside, joinLines(damaged), 0o600); err != nil {
				return fmt.Errorf("registry: journal: keeping its damaged lines aside: %w", err)
			}
			r.salvaged += len(damaged)
		}
		if err := r.commitLines(ctx, lines, ""); err != nil {
			return err
		}
	}
	// Both files are in the database now; start empty.
	_ = os.Remove(r.j.path + ".old")
	if err := r.j.f.Truncate(0); err != nil {
		return fmt.Errorf("registry: journal: %w", err)
	}
	r.j.size = 0
	return r.cutCalls(ctx)
}

func joinLines(ls [][]byte) []byte {
	var out []byte
	for _, l := range ls {
		out = append(out, l...)
	}
	return out
}

// CutCallError is the audit record's Error of a call an earlier life of the daemon
// admitted and never recorded: it stopped (killed, or unable to write the record)
// while the call was in flight.
const CutCallError = "proxy_stopped: the daemon stopped while the call was in flight; it was forwarded upstream and may be billed (reconcile it from the spend logs)"

// cutCalls records the calls admitted by an earlier life of the daemon and never
// settled: each gets an audit record (what was known of it, CutCallError) and its
// run is charged the tokens it reserved, since the upstream may have served (and
// billed) it whole.
func (r *Registry) cutCalls(ctx context.Context) error {
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("registry: cut calls: %w", err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, "SELECT ticket, reg_id, tokens, record FROM inflight")
	if err != nil {
		return corrupt(err)
	}
	type cut struct {
		ticket, reg string
		tokens      int64
		rec         []byte
	}
	var cuts []cut
	for rows.Next() {
		var c cut
		if err := rows.Scan(&c.ticket, &c.reg, &c.tokens, &c.rec); err != nil {
			rows.Close()
			return corrupt(err)
		}
		cuts = append(cuts, c)
	}
	rows.Close()
	if len(cuts) == 0 {
		return nil
	}
	for _, c := range cuts {
		var rec port.AuditRecord
		_ = json.Unmarshal(c.rec, &rec) // what was known; a damaged one is recorded empty
		rec.Error = CutCallError
		b, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "INSERT OR IGNORE INTO audit (reg_id, rid, record) SELECT ?, ?, ? WHERE EXISTS (SELECT 1 FROM registrations WHERE id = ?)", c.reg, "cut-"+c.ticket, b, c.reg); err != nil {
			return fmt.Errorf("registry: cut calls: %w", err)
		}
		if _, err := tx.ExecContext(ctx, "UPDATE registrations SET tokens = tokens + ? WHERE id = ?", c.tokens, c.reg); err != nil {
			return fmt.Errorf("registry: cut calls: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, "DELETE FROM inflight"); err != nil {
		return fmt.Errorf("registry: cut calls: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("registry: cut calls: %w", err)
	}
	r.cut = len(cuts)
	return nil
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
		} else {
			r.moverErr.Store("")
		}
		r.j.flushMu.Unlock()
	}
}

// ballast is a file of reserved space beside the journal: given up when the disk
// is full, so that the records of calls in flight and the database's commits have
// room; while it is not whole, no call is admitted. Made again as soon as the file
// system has room for it.
type ballast struct {
	path string
	size int64
	ok   bool
}

// restore makes the ballast whole if it is not and the file system has room for it,
// and reports whether it is whole. No ballast (size 0) is always whole.
func (b *ballast) restore() bool {
	if b.ok || b.size <= 0 {
		return true
	}
	if avail, known := freeSpace(filepath.Dir(b.path)); known && avail < b.size {
		return false // one statfs: a refused call costs no allocation attempt
	}
	f, err := os.OpenFile(b.path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := allocate(f, b.size); err != nil {
		_ = f.Truncate(0) // never keep part of it: the room is someone's
		return false
	}
	b.ok = true
	return true
}

// release gives the ballast's space back, and reports whether it had any.
func (b *ballast) release() bool {
	if b.size <= 0 {
		return false
	}
	had := b.ok
	if fi, err := os.Stat(b.path); err == nil && fi.Size() > 0 {
		had = true
	}
	_ = os.Truncate(b.path, 0)
	b.ok = false
	return had
}
