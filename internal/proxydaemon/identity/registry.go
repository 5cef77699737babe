// Package identity is the shared proxy daemon's identity registry (the container
// identity design of foundry-sandbox, seed 003): who a request comes from, kept in
// SQLite (pure Go, no cgo) behind an in-memory write-through cache.
//
// A registration is found by the socket a request arrived on (the usual case: one
// socket directory per run) or, for sandboxes on an internal network, by the
// source IP, optionally confirmed by an X-Sandbox-ID header
// "name:start-time:token" whose token is stored only as a SHA-256 hash. Renewals
// of last_seen stay in memory and are written in batches (Flush); registrations
// not seen for the TTL (default 24 h) are removed by GC (run it every 5 minutes),
// Remove deletes one at once. A new start time for a known name is a restart: a
// new registration takes the IP, the old one is left to expire.
//
// Every completed call's audit record and the run's usage are written in the same
// transaction before the call ends, so they survive a crash of the daemon.
package identity

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // the pure-Go SQLite driver

	"github.com/agentsandbox/sandbox/port"
)

// Defaults of the registration lifecycle.
const (
	DefaultTTL        = 24 * time.Hour
	DefaultGCInterval = 5 * time.Minute
	// StartTimeSkew is how far an X-Sandbox-ID start time may differ from the
	// registered one.
	StartTimeSkew = 2 * time.Second
)

// Errors. ErrCorrupt reports a database file that is not a usable registry.
var (
	ErrCorrupt  = errors.New("registry: database file is corrupt or not a registry")
	ErrNotFound = fmt.Errorf("registry: %w", port.ErrNotFound)
	ErrExists   = fmt.Errorf("registry: %w: registration exists", port.ErrInvalidSpec)
	ErrIdentity = errors.New("registry: X-Sandbox-ID does not match the registration")
	ErrClosed   = fmt.Errorf("registry: %w", port.ErrClosed)
)

// State is a registration's lifecycle state.
type State string

// States.
const (
	Active     State = "active"
	Superseded State = "superseded" // a restart registered anew; left to expire
	Removed    State = "removed"
)

// Registration is one sandbox instance the proxy serves.
type Registration struct {
	// ID is the registry's key, made by Register.
	ID      string `json:"id"`
	RunID   string `json:"run_id"`
	Attempt int    `json:"attempt"`
	// Name is the sandbox name of X-Sandbox-ID (the run id unless told otherwise).
	Name string `json:"name"`
	// StartTime is the sandbox's start time; a different one for the same name
	// is a restart.
	StartTime time.Time `json:"start_time"`
	// Socket is the per-run socket directory's name, for socket registrations.
	Socket string `json:"socket,omitempty"`
	// IP is the sandbox's source address, for registrations on a network.
	IP netip.Addr `json:"ip,omitzero"`
	// SessionHash is SHA-256 of the session token of X-Sandbox-ID; the token
	// itself is never stored.
	SessionHash []byte `json:"-"`
	// Spec is the front's opaque description of the run (sealed by the caller
	// when it holds secrets).
	Spec         []byte    `json:"-"`
	RegisteredAt time.Time `json:"registered_at"`
	LastSeen     time.Time `json:"last_seen"`
	State        State     `json:"state"`
	// Calls and Tokens are the run's usage as of its last completed call.
	Calls  int   `json:"calls"`
	Tokens int64 `json:"tokens"`
}

// Config configures Open.
type Config struct {
	// Path is the database file; it is created (mode 0600) if missing.
	Path string
	// TTL is how long a registration lives without being seen (default DefaultTTL).
	TTL time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Registry is the identity registry. It is safe for concurrent use.
type Registry struct {
	db *sql.DB
	// Prepared statements of the per-call path (AppendAudit).
	insAudit, updUsage *sql.Stmt
	j                  *journal
	moverErr           atomic.Value // string: the mover's last error
	ttl                time.Duration
	now                func() time.Time

	mu       sync.RWMutex
	closed   bool
	byID     map[string]*entry
	bySocket map[string]*entry
	byIP     map[netip.Addr]*entry
	byName   map[string]*entry // the active registration of each name
}

// entry is a cached registration; seen is renewed without the lock.
type entry struct {
	reg   Registration
	seen  atomicTime
	dirty atomicBool
}

const schema = `
CREATE TABLE IF NOT EXISTS registrations (
	id TEXT PRIMARY KEY,
	run_id TEXT NOT NULL,
	attempt INTEGER NOT NULL,
	name TEXT NOT NULL,
	start_time INTEGER NOT NULL,
	socket TEXT NOT NULL DEFAULT '',
	ip TEXT NOT NULL DEFAULT '',
	session_hash BLOB,
	spec BLOB,
	registered_at INTEGER NOT NULL,
	last_seen INTEGER NOT NULL,
	state TEXT NOT NULL,
	calls INTEGER NOT NULL DEFAULT 0,
	tokens INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS audit (
	reg_id TEXT NOT NULL REFERENCES registrations(id) ON DELETE CASCADE,
	seq INTEGER PRIMARY KEY AUTOINCREMENT,
	rid TEXT NOT NULL UNIQUE,
	record BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_reg ON audit(reg_id, seq);
CREATE TABLE IF NOT EXISTS attestations (
	reg_id TEXT PRIMARY KEY REFERENCES registrations(id) ON DELETE CASCADE,
	body BLOB NOT NULL
);
`

// Open opens (or creates) the registry at cfg.Path and loads every registration
// into memory. A file that is not a valid registry gives an error wrapping
// ErrCorrupt; nothing is changed in it.
func Open(ctx context.Context, cfg Config) (*Registry, error) {
	if cfg.Path == "" || strings.ContainsAny(cfg.Path, "?#") {
		return nil, port.Invalidf("registry: path %q is empty or has ? or #", cfg.Path)
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	// Created 0600 before SQLite sees it: the registry holds sealed keys.
	f, err := os.OpenFile(cfg.Path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("registry: open %s: %w", cfg.Path, err)
	}
	f.Close()
	// WAL with synchronous=NORMAL: a commit is in the OS's hands when it returns,
	// so a killed daemon loses nothing it committed (a power cut may lose the last
	// commits). secure_delete overwrites what is deleted (sealed keys).
	dsn := "file:" + cfg.Path + "?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)" +
		"&_pragma=foreign_keys(ON)&_pragma=secure_delete(ON)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	// One connection: SQLite has one writer anyway, and reads are served from memory.
	db.SetMaxOpenConns(1)
	r := &Registry{db: db, ttl: cfg.TTL, now: cfg.Now,
		byID: map[string]*entry{}, bySocket: map[string]*entry{}, byIP: map[netip.Addr]*entry{}, byName: map[string]*entry{}}
	if err := r.init(ctx); err != nil {
		db.Close()
		return nil, err
	}
	if r.j, err = openJournal(cfg.Path + ".journal"); err != nil {
		db.Close()
		return nil, err
	}
	// The journal first: it may hold usage newer than the rows.
	err = r.replay(ctx)
	if err == nil {
		err = r.load(ctx)
	}
	if err != nil {
		r.j.f.Close()
		db.Close()
		return nil, err
	}
	go r.mover()
	return r, nil
}

func (r *Registry) init(ctx context.Context) error {
	var check string
	if err := r.db.QueryRowContext(ctx, "PRAGMA quick_check").Scan(&check); err != nil {
		return corrupt(err)
	}
	if check != "ok" {
		return fmt.Errorf("%w: quick_check: %s", ErrCorrupt, check)
	}
	if _, err := r.db.ExecContext(ctx, schema); err != nil {
		return corrupt(err)
	}
	var err error
	// Records of registrations removed meanwhile are skipped, each record is stored once.
	if r.insAudit, err = r.db.PrepareContext(ctx, "INSERT OR IGNORE INTO audit (reg_id, rid, record) SELECT ?, ?, ? WHERE EXISTS (SELECT 1 FROM registrations WHERE id = ?)"); err != nil {
		return corrupt(err)
	}
	if r.updUsage, err = r.db.PrepareContext(ctx, "UPDATE registrations SET calls = max(calls, ?), tokens = max(tokens, ?) WHERE id = ?"); err != nil {
		return corrupt(err)
	}
	return nil
}

// load fills the cache from the database.
func (r *Registry) load(ctx context.Context) error {
	rows, err := r.db.QueryContext(ctx, `SELECT id, run_id, attempt, name, start_time, socket, ip, session_hash, spec,
		registered_at, last_seen, state, calls, tokens FROM registrations`)
	if err != nil {
		return corrupt(err)
	}
	defer rows.Close()
	for rows.Next() {
		var g Registration
		var start, reg, seen int64
		var ip, state string
		if err := rows.Scan(&g.ID, &g.RunID, &g.Attempt, &g.Name, &start, &g.Socket, &ip, &g.SessionHash, &g.Spec,
			&reg, &seen, &state, &g.Calls, &g.Tokens); err != nil {
			return corrupt(err)
		}
		g.StartTime, g.RegisteredAt, g.LastSeen, g.State = time.Unix(0, start).UTC(), time.Unix(0, reg).UTC(), time.Unix(0, seen).UTC(), State(state)
		if ip != "" {
			if g.IP, err = netip.ParseAddr(ip); err != nil {
				return fmt.Errorf("%w: registration %s has a bad ip", ErrCorrupt, g.ID)
			}
		}
		r.index(&g)
	}
	if err := rows.Err(); err != nil {
		return corrupt(err)
	}
	return nil
}

func corrupt(err error) error {
	msg := err.Error()
	if strings.Contains(msg, "not a database") || strings.Contains(msg, "malformed") || strings.Contains(msg, "corrupt") {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return fmt.Errorf("registry: %w", err)
}

// index adds a loaded or new registration to the cache (r.mu held or not shared yet).
func (r *Registry) index(g *Registration) *entry {
	e := &entry{reg: *g}
	e.seen.Store(g.LastSeen)
	r.byID[g.ID] = e
	if g.State != Active {
		return e
	}
	if g.Socket != "" {
		r.bySocket[g.Socket] = e
	}
	if g.IP.IsValid() {
		r.byIP[g.IP] = e
	}
	r.byName[g.Name] = e
	return e
}

func (r *Registry) unindex(e *entry) {
	if r.bySocket[e.reg.Socket] == e {
		delete(r.bySocket, e.reg.Socket)
	}
	if r.byIP[e.reg.IP] == e {
		delete(r.byIP, e.reg.IP)
	}
	if r.byName[e.reg.Name] == e {
		delete(r.byName, e.reg.Name)
	}
}

// RegisterResult is what Register did.
type RegisterResult struct {
	Registration
	// Restarted names the registration the new one supersedes: same name, another
	// start time. It stays until it expires; its budget is not carried over.
	Restarted string
}

// Register records a new registration. g.RunID, g.Name (default: the run id) and
// one of g.Socket and g.IP are required; a non-empty sessionToken is stored as
// its hash. An active registration with the same socket, IP or name and the same
// start time gives ErrExists; with another start time it is a restart.
func (r *Registry) Register(ctx context.Context, g Registration, sessionToken string) (RegisterResult, error) {
	if err := port.ValidateRunID(g.RunID); err != nil {
		return RegisterResult{}, err
	}
	if g.Name == "" {
		g.Name = g.RunID
	}
	if len(g.Name) > 128 || strings.ContainsAny(g.Name, ":\x00\r\n") {
		return RegisterResult{}, port.Invalidf("registry: sandbox name is over 128 bytes or holds ':' or control characters")
	}
	if (g.Socket == "") == !g.IP.IsValid() {
		return RegisterResult{}, port.Invalidf("registry: a registration has a socket or an IP, exactly one")
	}
	if sessionToken != "" {
		h := sha256.Sum256([]byte(sessionToken))
		g.SessionHash = h[:]
	}
	now := r.now().UTC()
	if g.StartTime.IsZero() {
		g.StartTime = now
	}
	g.StartTime = g.StartTime.UTC()
	g.RegisteredAt, g.LastSeen, g.State = now, now, Active
	g.ID = newID()

	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return RegisterResult{}, ErrClosed
	}
	var res RegisterResult
	old := r.byName[g.Name]
	if o := r.bySocket[g.Socket]; g.Socket != "" && o != nil && o != old {
		return res, ErrExists
	}
	if o := r.byIP[g.IP]; g.IP.IsValid() && o != nil && o != old {
		// The address was given to another sandbox: the old holder is gone.
		if err := r.setState(ctx, o, Superseded); err != nil {
			return res, err
		}
	}
	if old != nil {
		if old.reg.StartTime.Equal(g.StartTime) {
			return res, ErrExists
		}
		if err := r.setState(ctx, old, Superseded); err != nil {
			return res, err
		}
		res.Restarted = old.reg.ID
	}
	_, err := r.db.ExecContext(ctx, `INSERT INTO registrations (id, run_id, attempt, name, start_time, socket, ip, session_hash, spec,
		registered_at, last_seen, state, calls, tokens) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)`,
		g.ID, g.RunID, g.Attempt, g.Name, g.StartTime.UnixNano(), g.Socket, ipString(g.IP), g.SessionHash, g.Spec,
		g.RegisteredAt.UnixNano(), g.LastSeen.UnixNano(), string(g.State), g.Calls, g.Tokens)
	if err != nil {
		return res, fmt.Errorf("registry: insert: %w", err)
	}
	r.index(&g)
	res.Registration = g
	return res, nil
}

func (r *Registry) setState(ctx context.Context, e *entry, s State) error {
	if _, err := r.db.ExecContext(ctx, "UPDATE registrations SET state = ? WHERE id = ?", string(s), e.reg.ID); err != nil {
		return fmt.Errorf("registry: update: %w", err)
	}
	r.unindex(e)
	e.reg.State = s
	return nil
}

func ipString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// BySocket returns the active registration of a socket directory and renews it.
func (r *Registry) BySocket(socket string) (Registration, bool) {
	r.mu.RLock()
	e := r.bySocket[socket]
	r.mu.RUnlock()
	return r.seen(e)
}

// ByID returns a registration in any state, without renewing it.
func (r *Registry) ByID(id string) (Registration, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e := r.byID[id]
	if e == nil {
		return Registration{}, false
	}
	g := e.reg
	g.LastSeen = e.seen.Load()
	return g, true
}

// ByIP returns the active registration of a source address and renews it. When
// sandboxID (an X-Sandbox-ID value) is not empty it must name the registration:
// same name, a start time within StartTimeSkew and the session token whose hash
// is stored; otherwise the error wraps ErrIdentity, and the registration of the
// address comes with it (not renewed) so the refusal can be recorded against it.
func (r *Registry) ByIP(ip netip.Addr, sandboxID string) (Registration, error) {
	r.mu.RLock()
	e := r.byIP[ip.Unmap()]
	var g Registration
	if e != nil {
		g = e.reg
	}
	r.mu.RUnlock()
	if e == nil {
		return Registration{}, ErrNotFound
	}
	if sandboxID != "" {
		if err := checkSandboxID(g, sandboxID); err != nil {
			return g, err
		}
	}
	g, _ = r.seen(e)
	return g, nil
}

// ParseSandboxID splits "name:start-time:token"; the start time is RFC 3339 and
// may itself hold colons, so the name is up to the first colon and the token
// after the last.
func ParseSandboxID(v string) (name string, start time.Time, token string, err error) {
	i, j := strings.IndexByte(v, ':'), strings.LastIndexByte(v, ':')
	if len(v) > 512 || i <= 0 || j <= i || j == len(v)-1 {
		return "", time.Time{}, "", fmt.Errorf("%w: not name:start-time:token", ErrIdentity)
	}
	start, err = time.Parse(time.RFC3339Nano, v[i+1:j])
	if err != nil {
		return "", time.Time{}, "", fmt.Errorf("%w: start time is not RFC 3339", ErrIdentity)
	}
	return v[:i], start, v[j+1:], nil
}

func checkSandboxID(g Registration, v string) error {
	name, start, token, err := ParseSandboxID(v)
	if err != nil {
		return err
	}
	h := sha256.Sum256([]byte(token))
	d := start.Sub(g.StartTime)
	switch {
	case name != g.Name:
		return fmt.Errorf("%w: name", ErrIdentity)
	case d > StartTimeSkew || d < -StartTimeSkew:
		return fmt.Errorf("%w: start time (a restarted sandbox registers anew)", ErrIdentity)
	case len(g.SessionHash) == 0 || subtle.ConstantTimeCompare(h[:], g.SessionHash) != 1:
		return fmt.Errorf("%w: session token", ErrIdentity)
	}
	return nil
}

// seen renews e in memory (Flush writes it) and returns it.
func (r *Registry) seen(e *entry) (Registration, bool) {
	if e == nil {
		return Registration{}, false
	}
	now := r.now().UTC()
	e.seen.Store(now)
	e.dirty.Store(true)
	r.mu.RLock()
	g := e.reg
	r.mu.RUnlock()
	g.LastSeen = now
	return g, true
}

// Touch renews a registration by id.
func (r *Registry) Touch(id string) bool {
	r.mu.RLock()
	e := r.byID[id]
	r.mu.RUnlock()
	_, ok := r.seen(e)
	return ok
}

// Flush writes renewed last_seen times in one transaction.
func (r *Registry) Flush(ctx context.Context) error {
	r.mu.RLock()
	var dirty []*entry
	for _, e := range r.byID {
		if e.dirty.Swap(false) {
			dirty = append(dirty, e)
		}
	}
	r.mu.RUnlock()
	if len(dirty) == 0 {
		return nil
	}
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("registry: flush: %w", err)
	}
	defer tx.Rollback()
	for _, e := range dirty {
		if _, err := tx.ExecContext(ctx, "UPDATE registrations SET last_seen = ? WHERE id = ?", e.seen.Load().UnixNano(), e.reg.ID); err != nil {
			return fmt.Errorf("registry: flush: %w", err)
		}
	}
	return tx.Commit()
}

// Remove deletes a registration and its audit at once (proactive removal).
func (r *Registry) Remove(ctx context.Context, id string) error {
	// Journaled records go in first (and then with the registration).
	r.j.flushMu.Lock()
	defer r.j.flushMu.Unlock()
	if err := r.flushAudit(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.byID[id]
	if e == nil {
		return ErrNotFound
	}
	if _, err := r.db.ExecContext(ctx, "DELETE FROM registrations WHERE id = ?", id); err != nil {
		return fmt.Errorf("registry: remove: %w", err)
	}
	r.unindex(e)
	delete(r.byID, id)
	return nil
}

// GC removes every registration not seen for the TTL (and those marked
// removed) and returns them.
func (r *Registry) GC(ctx context.Context) ([]Registration, error) {
	if err := r.Flush(ctx); err != nil {
		return nil, err
	}
	r.j.flushMu.Lock()
	defer r.j.flushMu.Unlock()
	if err := r.flushAudit(ctx); err != nil {
		return nil, err
	}
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Registration
	for id, e := range r.byID {
		if e.reg.State != Removed && now.Sub(e.seen.Load()) <= r.ttl {
			continue
		}
		if _, err := r.db.ExecContext(ctx, "DELETE FROM registrations WHERE id = ?", id); err != nil {
			return out, fmt.Errorf("registry: gc: %w", err)
		}
		r.unindex(e)
		delete(r.byID, id)
		g := e.reg
		g.LastSeen = e.seen.Load()
		out = append(out, g)
	}
	return out, nil
}

// List returns every registration.
func (r *Registry) List() []Registration {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Registration, 0, len(r.byID))
	for _, e := range r.byID {
		g := e.reg
		g.LastSeen = e.seen.Load()
		out = append(out, g)
	}
	return out
}

// Usage is a registration's budget use.
type Usage struct {
	Calls  int
	Tokens int64
}

// AppendAudit stores one audit record of a registration and its usage after
// the call. It returns once the record is in the journal (durable against the
// process's death); it reaches the database within JournalFlushInterval.
func (r *Registry) AppendAudit(ctx context.Context, id string, rec port.AuditRecord, u Usage) error {
	return r.appendLine(id, &rec, u)
}

// AppendUsage stores a registration's usage without a record: a call counted
// against the budget before it is forwarded, so that a daemon killed while the
// call is in flight still counts it after a restart. Durable like AppendAudit.
func (r *Registry) AppendUsage(ctx context.Context, id string, u Usage) error {
	return r.appendLine(id, nil, u)
}

func (r *Registry) appendLine(id string, rec *port.AuditRecord, u Usage) error {
	if err := r.j.append(id, rec, u); err != nil {
		return err
	}
	r.mu.Lock()
	if e := r.byID[id]; e != nil {
		e.reg.Calls, e.reg.Tokens = max(e.reg.Calls, u.Calls), max(e.reg.Tokens, u.Tokens)
	}
	r.mu.Unlock()
	return nil
}

// SetAttestation stores a registration's attestation, once: it is committed
// when SetAttestation returns, and a second one is refused (ErrConflict
// semantics: false, nil). The first report is the bridge's; a restarted daemon
// must not take another (the agent's).
func (r *Registry) SetAttestation(ctx context.Context, id string, a *port.Attestation) (bool, error) {
	b, err := json.Marshal(a)
	if err != nil {
		return false, err
	}
	res, err := r.db.ExecContext(ctx, "INSERT OR IGNORE INTO attestations (reg_id, body) SELECT ?, ? WHERE EXISTS (SELECT 1 FROM registrations WHERE id = ?)", id, b, id)
	if err != nil {
		return false, fmt.Errorf("registry: attestation: %w", err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// Attestation returns a registration's stored attestation, nil if none.
func (r *Registry) Attestation(ctx context.Context, id string) (*port.Attestation, error) {
	var b []byte
	err := r.db.QueryRowContext(ctx, "SELECT body FROM attestations WHERE reg_id = ?", id).Scan(&b)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("registry: attestation: %w", err)
	}
	var a port.Attestation
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("%w: attestation of %s", ErrCorrupt, id)
	}
	return &a, nil
}

// sync moves journaled records into the database now.
func (r *Registry) sync(ctx context.Context) error {
	r.j.flushMu.Lock()
	defer r.j.flushMu.Unlock()
	return r.flushAudit(ctx)
}

// Entry is a stored audit record and its sequence number (increasing, not
// contiguous).
type Entry struct {
	Seq    int64
	Record port.AuditRecord
}

// Audit returns a registration's stored records, oldest first, after seq
// (0: all), with the seq of the last one.
func (r *Registry) Audit(ctx context.Context, id string, after int64) ([]port.AuditRecord, int64, error) {
	es, last, err := r.Entries(ctx, id, after)
	out := make([]port.AuditRecord, 0, len(es))
	for _, e := range es {
		out = append(out, e.Record)
	}
	if len(out) == 0 {
		out = nil
	}
	return out, last, err
}

// Entries is Audit with each record's seq.
func (r *Registry) Entries(ctx context.Context, id string, after int64) ([]Entry, int64, error) {
	if err := r.sync(ctx); err != nil {
		return nil, after, err
	}
	rows, err := r.db.QueryContext(ctx, "SELECT seq, record FROM audit WHERE reg_id = ? AND seq > ? ORDER BY seq", id, after)
	if err != nil {
		return nil, after, fmt.Errorf("registry: audit: %w", err)
	}
	defer rows.Close()
	var out []Entry
	last := after
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&last, &b); err != nil {
			return out, last, fmt.Errorf("registry: audit: %w", err)
		}
		var rec port.AuditRecord
		if err := json.Unmarshal(b, &rec); err != nil {
			return out, last, fmt.Errorf("%w: audit record %d", ErrCorrupt, last)
		}
		out = append(out, Entry{Seq: last, Record: rec})
	}
	return out, last, rows.Err()
}

// Close flushes renewals and closes the database.
func (r *Registry) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.mu.Unlock()
	close(r.j.stop)
	<-r.j.done
	aerr := r.sync(context.Background())
	r.j.mu.Lock()
	if r.j.f != nil {
		r.j.f.Close()
		r.j.f = nil
	}
	r.j.mu.Unlock()
	if aerr == nil {
		// Everything journaled is in the database.
		_ = os.Remove(r.j.path)
	}
	ferr := errors.Join(aerr, r.Flush(context.Background()))
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	return errors.Join(ferr, r.db.Close())
}
