package inprocproxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentsandbox/sandbox/internal/logattr"
	"github.com/agentsandbox/sandbox/internal/optcheck"
	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/proxypolicy"

	"github.com/agentsandbox/sandbox/internal/llmproxy"
	"github.com/agentsandbox/sandbox/internal/telemetry"
	"github.com/agentsandbox/sandbox/port"
)

// Manager starts in-process per-run LLM proxies. It implements port.ProxyManager and
// port.Sweeper. A Manager is safe for concurrent use; its zero value is not usable (use New).
type Manager struct {
	cfg       config
	ownTransp *http.Transport // nil when WithTransport was given
	conns     *llmproxy.ConnLimit
	tel       *telemetry.T

	mu     sync.Mutex
	active map[string]*Proxy // by per-run directory name
}

var (
	_ port.ProxyManager = (*Manager)(nil)
	_ port.Sweeper      = (*Manager)(nil)
	_ port.Proxy        = (*Proxy)(nil)
	_ port.Attester     = (*Proxy)(nil)
)

// NewManager returns a Manager. It does no I/O: directories are made by Start. Errors wrap
// port.ErrInvalidSpec (or port.ErrUnsupported, see WithSandboxUID).
func NewManager(opts ...Option) (*Manager, error) {
	cfg := defaultConfig()
	if err := optcheck.Apply(&cfg, opts); err != nil {
		return nil, opErr("New", "", err)
	}
	// The shortest per-run socket path: <base>/<owner>/<1 char>-<random>/llm.sock.
	if n := len(cfg.baseDir) + 1 + len(cfg.owner) + 1 + 2 + randSuffixLen + 1 + len(port.LLMSocketName); n > maxSocketPath {
		return nil, opErr("New", "", port.Invalidf("base dir %q with owner %q is too long for unix socket paths (%d > %d bytes)", cfg.baseDir, cfg.owner, n, maxSocketPath))
	}
	cfg.logger = cfg.logger.With(logattr.Component, "inproc")
	m := &Manager{cfg: cfg, active: make(map[string]*Proxy), conns: llmproxy.NewConnLimit(cfg.connsTotal), tel: telemetry.New(cfg.tp, cfg.mp)}
	if cfg.transport == nil {
		m.ownTransp = llmproxy.NewTransport()
		m.cfg.transport = m.ownTransp
	}
	return m, nil
}

// ownerDir is where this manager's per-run directories and markers live.
func (m *Manager) ownerDir() string { return filepath.Join(m.cfg.baseDir, m.cfg.owner) }

// marker is the JSON file kept next to a per-run directory so a later Sweep can tell
// whose it is and how old it is, even after the process that made it died.
type marker struct {
	Version int               `json:"version"`
	Dir     string            `json:"dir"`
	PID     int               `json:"pid"`
	Labels  map[string]string `json:"labels"`
}

// Start validates spec, makes the per-run directory and marker, and starts serving on
// <dir>/llm.sock. The socket accepts connections when Start returns.
//
// Errors: port.ErrInvalidSpec for a bad spec (run id, key, attribution, upstream URL,
// budget, labels), with nothing created; a context error if ctx is done; otherwise a
// failure to create files or listen, wrapping port.ErrInternal. All arrive in a
// *port.OpError.
func (m *Manager) Start(ctx context.Context, spec port.ProxySpec) (port.Proxy, error) {
	p, err := m.start(ctx, spec)
	if err != nil {
		return nil, err // not a typed nil inside the interface
	}
	return p, nil
}

// StartProxy is Start returning the concrete type, for hosts that want Proxy.Audit.
func (m *Manager) StartProxy(ctx context.Context, spec port.ProxySpec) (*Proxy, error) {
	return m.start(ctx, spec)
}

func (m *Manager) start(ctx context.Context, spec port.ProxySpec) (*Proxy, error) {
	policy, upstream, err := validate(spec)
	if err != nil {
		return nil, opErr("Start", spec.RunID, err)
	}
	egressPolicy, err := compileEgress(spec.Egress)
	if err != nil {
		return nil, opErr("Start", spec.RunID, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, opErr("Start", spec.RunID, err)
	}
	name, err := m.dirName(spec.RunID)
	if err != nil {
		return nil, opErr("Start", spec.RunID, err)
	}
	if err := m.ensureOwnerDir(); err != nil {
		return nil, opErr("Start", spec.RunID, err)
	}
	created := time.Now().UTC()
	dir := filepath.Join(m.ownerDir(), name)
	markerPath := dir + ".json"
	if err := writeMarker(markerPath, m.markerFor(name, spec, created)); err != nil {
		return nil, opErr("Start", spec.RunID, internal("write marker: %w", err))
	}
	// From here on, undo what was made if anything fails. The marker goes last, so a
	// crash in between still leaves something Sweep can find.
	cleanup := func() {
		_ = os.RemoveAll(dir)
		_ = os.Remove(markerPath)
	}
	if err := os.Mkdir(dir, 0o711); err != nil {
		cleanup()
		return nil, opErr("Start", spec.RunID, internal("make run dir: %w", err))
	}
	// Mkdir is subject to the umask; the sandbox user needs the execute bit.
	if err := os.Chmod(dir, 0o711); err != nil {
		cleanup()
		return nil, opErr("Start", spec.RunID, internal("chmod run dir: %w", err))
	}
	sock := filepath.Join(dir, port.LLMSocketName)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		cleanup()
		return nil, opErr("Start", spec.RunID, internal("listen on %s: %w", sock, err))
	}
	// The sandbox runs as another uid: it needs write permission on the socket to
	// connect. The directory above it is not listable and its parents are 0700, so only
	// the mounted sandbox (and root) can reach the socket at all.
	if err := os.Chmod(sock, 0o666); err != nil {
		_ = ln.Close()
		cleanup()
		return nil, opErr("Start", spec.RunID, internal("chmod socket: %w", err))
	}
	p := newProxy(m, spec, policy, upstream, name, dir, markerPath, created, trace.SpanContextFromContext(ctx), "")
	if egressPolicy != nil {
		if err := p.startEgress(egressPolicy); err != nil {
			_ = ln.Close()
			cleanup()
			return nil, opErr("Start", spec.RunID, err)
		}
	}
	m.mu.Lock()
	m.active[name] = p
	m.mu.Unlock()
	p.serve(ln)
	m.cfg.logger.LogAttrs(ctx, slog.LevelDebug, "inproc: proxy started", slog.String("run_id", spec.RunID), slog.String("dir", dir))
	return p, nil
}

// validate checks a spec without side effects.
func validate(spec port.ProxySpec) (*proxypolicy.Policy, *url.URL, error) {
	return proxypolicy.ValidateSpec(spec)
}

// dirName is <runID>-<random>, with the run id shortened if the socket path would not
// fit otherwise (the marker keeps the full id).
func (m *Manager) dirName(runID string) (string, error) {
	var b [randSuffixLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", internal("random: %w", err)
	}
	room := maxSocketPath - (len(m.ownerDir()) + 1 + 1 + randSuffixLen + 1 + len(port.LLMSocketName))
	prefix := runID
	if len(prefix) > room {
		prefix = prefix[:room]
	}
	return prefix + "-" + hex.EncodeToString(b[:]), nil
}

func (m *Manager) markerFor(name string, spec port.ProxySpec, created time.Time) marker {
	labels := make(map[string]string, len(spec.Labels)+4)
	for k, v := range spec.Labels {
		labels[k] = v
	}
	labels[port.LabelOwner] = m.cfg.owner
	labels[port.LabelRunID] = spec.RunID
	labels[port.LabelCreatedAt] = created.Format(time.RFC3339Nano)
	labels[port.LabelKind] = port.KindProxy
	return marker{Version: 1, Dir: name, PID: os.Getpid(), Labels: labels}
}

func writeMarker(path string, mk marker) error {
	b, err := json.Marshal(mk)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	return f.Close()
}

// ensureOwnerDir makes <base>/<owner> (0700) and checks that neither it nor the base can
// be tampered with by other users: a shared temporary directory is a classic place for
// someone to plant a symlink or a directory of their own.
func (m *Manager) ensureOwnerDir() error {
	od := m.ownerDir()
	if err := os.MkdirAll(od, 0o700); err != nil {
		return internal("make %s: %w", od, err)
	}
	if err := checkDir(m.cfg.baseDir, false); err != nil {
		return err
	}
	return checkDir(od, true)
}

func checkDir(path string, mustOwn bool) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return internal("check %s: %w", path, err)
	}
	if !fi.IsDir() {
		return internal("%s is not a directory (a symlink?)", path)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	uid := os.Geteuid()
	if int(st.Uid) != uid && (mustOwn || st.Uid != 0) {
		return internal("%s is owned by uid %d, not by this process (uid %d)", path, st.Uid, uid)
	}
	if fi.Mode().Perm()&0o022 != 0 && fi.Mode()&fs.ModeSticky == 0 {
		return internal("%s is writable by other users (mode %v)", path, fi.Mode().Perm())
	}
	return nil
}

func (m *Manager) forget(name string) {
	m.mu.Lock()
	delete(m.active, name)
	m.mu.Unlock()
}

func (m *Manager) isActive(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.active[name]
	return ok
}

// Shutdown stops every proxy this manager still runs (as Proxy.Stop does, bounded by ctx)
// and closes idle upstream connections of the default transport. Proxies started later
// still work. It returns the first Stop error.
func (m *Manager) Shutdown(ctx context.Context) error {
	m.mu.Lock()
	ps := make([]*Proxy, 0, len(m.active))
	for _, p := range m.active {
		ps = append(ps, p)
	}
	m.mu.Unlock()
	var errs []error
	for _, p := range ps {
		if _, err := p.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if m.ownTransp != nil {
		m.ownTransp.CloseIdleConnections()
	}
	return errors.Join(errs...)
}

func internal(format string, args ...any) error {
	return fmt.Errorf("%w: %w", port.ErrInternal, fmt.Errorf(format, args...))
}

// opErr is err in the adapter's *port.OpError (runner.OpErr).
func opErr(op, runID string, err error) error { return runner.OpErr("inproc."+op, runID, err) }
