package docker

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/adapters/docker/internal/nginxconf"
	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/internal/logattr"
	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/proxypolicy"
)

// Paths inside the proxy container.
const (
	proxyConfDir  = "/etc/llmproxy"
	proxyLogDir   = "/var/log/llmproxy"
	proxyConfFile = proxyConfDir + "/nginx.conf"
	proxyAuditLog = proxyLogDir + "/audit.log"
	proxyMetaFile = "owner.json"
	// maxSocketPath is the longest socket path used (Linux allows 107 bytes).
	maxSocketPath = 104
)

// ErrAuditTruncated reports a proxy whose audit held more forwarded calls than the
// manager keeps (WithMaxAuditRecords): Stop returns the records it kept and an error
// matching it, since the calls over the limit cannot be billed from the audit.
var ErrAuditTruncated = errors.New("audit truncated")

// ProxyManager runs one nginx container per run as its LLM proxy (port.ProxyManager).
//
// The run's directory on the host holds three subdirectories: sock (bind-mounted into
// the proxy and, read-only, into the sandbox at /llm-sock), conf (the rendered
// configuration with the key; 0600, mounted read-only into the proxy only, and
// overwritten and deleted as soon as the proxy answers, so no key stays on disk once
// the proxy has started) and log (proxy only). Stop deletes the whole directory. With
// the bridge (WithBridge), the bridge is the proxy's init and ends it at the
// ProxySpec's Deadline even if the host died without calling Stop.
//
// The audit log is a named pipe in log that the manager reads while the run goes on,
// keeping at most the configured number of records: nothing of it reaches the disk, and
// a flooded proxy costs the host bounded memory. nginx waits on a full pipe rather than
// lose a record. Refused requests beyond an early sample are only counted (and logged
// by the manager at Info); forwarded calls over the limit make Stop fail with
// ErrAuditTruncated.
//
// nginx cannot count calls, so a ProxySpec with a Budget is refused with
// port.ErrUnsupported; use the in-process proxy (adapters/inprocproxy) for budgets. It
// cannot read bodies either: Start refuses unless the manager was made with
// WithUnfilteredBodies.
type ProxyManager struct {
	cfg config
}

var (
	_ port.ProxyManager = (*ProxyManager)(nil)
	_ port.Sweeper      = (*ProxyManager)(nil)
)

// NewProxyManager returns a ProxyManager. It does no I/O.
func NewProxyManager(opts ...Option) (*ProxyManager, error) {
	cfg := defaultConfig(ctorProxy)
	if err := cfg.apply(opts); err != nil {
		return nil, opErr("NewProxyManager", "", err)
	}
	if err := cfg.connect(); err != nil {
		return nil, opErr("NewProxyManager", "", err)
	}
	cfg.logger = cfg.logger.With(logattr.Component, "docker.proxy")
	return &ProxyManager{cfg: cfg}, nil
}

// Close releases the SDK client (unless it was passed in with WithClient).
func (m *ProxyManager) Close() error { return m.cfg.api.Close() }

// nginxProxy is one running proxy container.
type nginxProxy struct {
	m     *ProxyManager
	runID string
	id    string // container
	dir   string // per-run host directory

	// The audit pipe: the manager's read end, and a write end it holds so that the
	// reader sees no end of file before nginx has opened the pipe (closed in Stop,
	// once the container is gone).
	auditR, keeper *os.File
	done           chan struct{}
	collectedAudit *nginxconf.Audit
	collectErr     error

	once  sync.Once
	audit []port.AuditRecord
	err   error
}

// Start implements port.ProxyManager.
func (m *ProxyManager) Start(ctx context.Context, spec port.ProxySpec) (_ port.Proxy, err error) {
	if spec.Budget != (port.Budget{}) {
		return nil, opErr("ProxyManager.Start", spec.RunID, fmt.Errorf("%w: nginx cannot enforce a call or token budget; use the in-process proxy", port.ErrUnsupported))
	}
	if spec.RequireAttestation {
		return nil, opErr("ProxyManager.Start", spec.RunID, fmt.Errorf("%w: nginx cannot receive the sandbox's attestation; use the in-process proxy", port.ErrUnsupported))
	}
	if spec.Egress != nil {
		return nil, opErr("ProxyManager.Start", spec.RunID, fmt.Errorf("%w: the nginx proxy has no egress front (allowlist, placeholders, SSRF guard); use the in-process proxy (adapters/inprocproxy)", port.ErrUnsupported))
	}
	if !m.cfg.proxy.unfilteredBodies {
		return nil, opErr("ProxyManager.Start", spec.RunID, fmt.Errorf("%w: nginx cannot filter request bodies (fields such as user or metadata would reach LiteLLM as the agent wrote them); use the in-process proxy, or acknowledge with WithUnfilteredBodies", port.ErrUnsupported))
	}
	if err := port.ValidateLabels(spec.Labels); err != nil {
		return nil, opErr("ProxyManager.Start", spec.RunID, err)
	}
	pol, err := proxypolicy.NewPolicy(spec)
	if err != nil {
		return nil, opErr("ProxyManager.Start", spec.RunID, err)
	}
	conf, err := nginxconf.RenderNginx(nginxconf.NginxConfig{
		Policy:       pol,
		Upstream:     spec.Upstream,
		SocketPath:   port.LLMSocketDir + "/" + port.LLMSocketName,
		AuditLogPath: proxyAuditLog,
		RuntimeDir:   "/tmp",
		ScriptPath:   proxyConfDir + "/llmproxy.js",
	})
	if err != nil {
		return nil, opErr("ProxyManager.Start", spec.RunID, err)
	}
	now := time.Now()
	dir, uid, gid, err := m.makeDir(spec.RunID, conf, now)
	if err != nil {
		return nil, opErr("ProxyManager.Start", spec.RunID, err)
	}
	p := &nginxProxy{m: m, runID: spec.RunID, dir: dir}
	defer func() {
		if err != nil {
			_, _ = p.Stop(context.WithoutCancel(ctx))
		}
	}()
	if err := p.collect(); err != nil {
		return nil, opErr("ProxyManager.Start", spec.RunID, err)
	}

	id, err := m.createContainer(ctx, spec, dir, uid, gid, now)
	if err != nil {
		return nil, opErr("ProxyManager.Start", spec.RunID, fmt.Errorf("create proxy container: %w", err))
	}
	p.id = id
	if _, err := m.cfg.api.ContainerStart(ctx, p.id, client.ContainerStartOptions{}); err != nil {
		return nil, opErr("ProxyManager.Start", spec.RunID, fmt.Errorf("%w: start proxy container: %w", port.ErrUnavailable, err))
	}
	if err := p.waitReady(ctx); err != nil {
		return nil, opErr("ProxyManager.Start", spec.RunID, err)
	}
	// nginx has read its configuration (it answered /health) and never reads it
	// again (the manager never reloads it): the key leaves the disk now, so a host
	// killed from here on leaves it nowhere but in the proxy's memory.
	if err := shred(filepath.Join(dir, "conf", "nginx.conf")); err != nil {
		return nil, opErr("ProxyManager.Start", spec.RunID, fmt.Errorf("%w: removing the configuration with the key: %w", port.ErrInternal, err))
	}
	m.cfg.logger.Debug("proxy ready", logattr.RunID, spec.RunID, logattr.Container, short(p.id))
	return p, nil
}

// createContainer creates the proxy's locked-down nginx container (not started) on
// the run directory dir, running as uid:gid. With a deadline and the bridge, the
// bridge is its init and ends nginx at the deadline.
func (m *ProxyManager) createContainer(ctx context.Context, spec port.ProxySpec, dir string, uid, gid int, now time.Time) (string, error) {
	// Docker gives a tmpfs the mode of the image's directory under it (nginx images
	// have a 1777 /tmp), whatever mode= says.
	tmpfs := "rw,noexec,nosuid,nodev,size=67108864"
	pids := int64(64)
	entrypoint := append([]string{"nginx"}, nginxconf.NginxArgs(proxyConfFile)...)
	mounts := []mount.Mount{
		{Type: mount.TypeBind, Source: filepath.Join(dir, "sock"), Target: port.LLMSocketDir},
		{Type: mount.TypeBind, Source: filepath.Join(dir, "conf"), Target: proxyConfDir, ReadOnly: true},
		{Type: mount.TypeBind, Source: filepath.Join(dir, "log"), Target: proxyLogDir},
	}
	if !spec.Deadline.IsZero() {
		if m.cfg.bridgePath == "" {
			m.cfg.logger.Warn("a proxy deadline needs the bridge (WithProxyBridge): this proxy runs until stopped or swept", logattr.RunID, spec.RunID)
		} else {
			// The bridge as the proxy's init ends nginx at the deadline (TERM, then
			// KILL) even when no host is left to stop it; it passes Stop's QUIT on.
			entrypoint = append([]string{bridgeTarget, "-" + bridgeapi.FlagNoForward, "-" + bridgeapi.FlagDeadline, strconv.FormatInt(spec.Deadline.UnixMilli(), 10), "-" + bridgeapi.FlagGrace, "5s", "--"}, entrypoint...)
			mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: m.cfg.bridgePath, Target: bridgeTarget, ReadOnly: true})
		}
	}
	created, err := m.cfg.api.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: "agentsandbox-proxy-" + spec.RunID + "-" + randHex(4),
		Config: &container.Config{
			Image:      m.cfg.proxy.image,
			User:       fmt.Sprintf("%d:%d", uid, gid),
			Entrypoint: entrypoint,
			Cmd:        []string{},
			Labels:     runner.ResourceLabels(m.cfg.owner, spec.RunID, port.KindProxy, spec.Labels, now),
		},
		HostConfig: &container.HostConfig{
			NetworkMode:    container.NetworkMode(m.cfg.proxy.network),
			CapDrop:        []string{"ALL"},
			SecurityOpt:    []string{"no-new-privileges:true"},
			ReadonlyRootfs: true,
			Tmpfs:          map[string]string{"/tmp": tmpfs, "/run": tmpfs, "/var/cache/nginx": tmpfs},
			LogConfig:      container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "1m"}},
			Resources:      container.Resources{Memory: 128 << 20, MemorySwap: 128 << 20, PidsLimit: &pids},
			Mounts:         mounts,
		},
	})
	if err != nil {
		err = classify(err)
		if errors.Is(err, port.ErrNotFound) {
			err = fmt.Errorf("%w: the nginx image %q is not in Docker: pull it (docker pull %s), or build one from the host's nginx with no registry (agentimage.Nginx, then Runner.LoadImage) and pass it with WithProxyImage", err, m.cfg.proxy.image, m.cfg.proxy.image)
		}
		return "", err
	}
	return created.ID, nil
}

// shred overwrites a file with zeros, then removes it. NotFound is success.
func shred(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err == nil {
		_, err = f.Write(make([]byte, fi.Size()))
	}
	if err == nil {
		err = f.Sync()
	}
	_ = f.Close()
	if rerr := os.Remove(path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		return rerr
	}
	return err
}

// proxyUser is the uid:gid the proxy runs as: nginx's conventional 101 when the host
// process is root (it then owns the run's files), else the host process's own, so the
// 0600 configuration is readable without privileges.
func proxyUser() (int, int) {
	if os.Geteuid() == 0 {
		return 101, 101
	}
	return os.Getuid(), os.Getgid()
}

// makeDir creates the run's host directory: sock (0755), conf (0700) with the
// configuration (0600), log (0700) with the audit pipe (0600), all owned by the proxy
// user, and the owner record a sweep reads.
func (m *ProxyManager) makeDir(runID string, conf []byte, now time.Time) (dir string, uid, gid int, err error) {
	uid, gid = proxyUser()
	base := filepath.Join(m.cfg.proxy.baseDir, m.cfg.owner)
	if err := os.MkdirAll(base, 0o711); err != nil {
		return "", 0, 0, fmt.Errorf("proxy base dir: %w", err)
	}
	// The socket is <dir>/sock/llm.sock and unix socket paths are short (107 bytes):
	// the run id in the directory's name is shortened to fit (the owner record names
	// the run), and a base too long for any is refused.
	room := maxSocketPath - (len(base) + len("/-") + 10 + len("/sock/") + len(port.LLMSocketName))
	if room < 8 {
		return "", 0, 0, port.Invalidf("proxy base dir %q with owner %q is too long for the run's unix socket path (at most %d bytes)", m.cfg.proxy.baseDir, m.cfg.owner, maxSocketPath)
	}
	name := runID
	if len(name) > room {
		name = name[:room]
	}
	dir, err = os.MkdirTemp(base, name+"-")
	if err != nil {
		return "", 0, 0, fmt.Errorf("proxy run dir: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	if err := os.Chmod(dir, 0o711); err != nil {
		return "", 0, 0, err
	}
	meta, _ := json.Marshal(map[string]string{"owner": m.cfg.owner, "run_id": runID, "created_at": now.UTC().Format(time.RFC3339Nano)})
	if err := os.WriteFile(filepath.Join(dir, proxyMetaFile), meta, 0o600); err != nil {
		return "", 0, 0, err
	}
	for _, d := range []struct {
		name string
		mode os.FileMode
	}{{"sock", 0o755}, {"conf", 0o700}, {"log", 0o700}} {
		p := filepath.Join(dir, d.name)
		if err := os.Mkdir(p, d.mode); err != nil {
			return "", 0, 0, err
		}
		if err := os.Chmod(p, d.mode); err != nil {
			return "", 0, 0, err
		}
		if err := os.Lchown(p, uid, gid); err != nil {
			return "", 0, 0, err
		}
	}
	fifo := filepath.Join(dir, "log", "audit.log")
	if err := mkfifo(fifo, 0o600); err != nil {
		return "", 0, 0, fmt.Errorf("audit pipe: %w", err)
	}
	if err := os.Lchown(fifo, uid, gid); err != nil {
		return "", 0, 0, err
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{"nginx.conf", conf}, {"llmproxy.js", nginxconf.NginxScript()}} {
		cf := filepath.Join(dir, "conf", f.name)
		if err := os.WriteFile(cf, f.data, 0o600); err != nil {
			return "", 0, 0, err
		}
		if err := os.Lchown(cf, uid, gid); err != nil {
			return "", 0, 0, err
		}
	}
	return dir, uid, gid, nil
}

// waitReady polls /health through the socket with a growing backoff (50ms to 800ms)
// until it answers or the ready timeout passes; on failure the error carries the
// proxy's last log lines.
func (p *nginxProxy) waitReady(ctx context.Context) error {
	sock := filepath.Join(p.dir, "sock", port.LLMSocketName)
	hc := unixClient(sock)
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, p.m.cfg.proxy.readyTimeout)
	defer cancel()
	delay := 50 * time.Millisecond
	var last error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://proxy/health", nil)
		resp, err := hc.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && bytes.Contains(body, []byte(p.runID)) {
				return nil
			}
			err = fmt.Errorf("/health answered %d: %s", resp.StatusCode, bytes.TrimSpace(body))
		}
		last = err
		if ins, ierr := p.m.cfg.api.ContainerInspect(ctx, p.id, client.ContainerInspectOptions{}); ierr == nil && ins.Container.State != nil && !ins.Container.State.Running {
			return fmt.Errorf("%w: proxy exited with code %d before it was ready; last log lines:\n%s", port.ErrUnavailable, ins.Container.State.ExitCode, p.logTail(ctx))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: proxy not ready after %v (%v); last log lines:\n%s", port.ErrUnavailable, p.m.cfg.proxy.readyTimeout, last, p.logTail(ctx))
		case <-time.After(delay):
		}
		delay = min(2*delay, 800*time.Millisecond)
	}
}

func (p *nginxProxy) logTail(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	rc, err := p.m.cfg.api.ContainerLogs(ctx, p.id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Tail: "20"})
	if err != nil {
		return "(logs unavailable: " + err.Error() + ")"
	}
	defer rc.Close()
	var out bytes.Buffer
	_, _ = stdcopy.StdCopy(&out, &out, io.LimitReader(rc, 64<<10))
	return strings.TrimSpace(out.String())
}

// Socket implements port.Proxy.
func (p *nginxProxy) Socket() port.LLMSocket {
	return port.LLMSocket{HostDir: filepath.Join(p.dir, "sock")}
}

// Stop implements port.Proxy: nginx is asked to quit gracefully (finishing in-flight
// requests within a grace period), then the container is removed, the audit log read
// and the run's directory, configuration and key included, deleted.
func (p *nginxProxy) Stop(ctx context.Context) ([]port.AuditRecord, error) {
	p.once.Do(func() { p.audit, p.err = p.stop(ctx) })
	return p.audit, p.err
}

func (p *nginxProxy) stop(ctx context.Context) ([]port.AuditRecord, error) {
	var errs []error
	if p.id != "" {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.m.cfg.cleanupTimeout)
		defer cancel()
		grace := 5
		if _, err := p.m.cfg.api.ContainerStop(cctx, p.id, client.ContainerStopOptions{Signal: "SIGQUIT", Timeout: &grace}); err != nil && !errors.Is(classify(err), port.ErrNotFound) {
			p.m.cfg.logger.Warn("stopping proxy failed", logattr.RunID, p.runID, logattr.Err, err)
		}
		if _, err := p.m.cfg.api.ContainerRemove(cctx, p.id, client.ContainerRemoveOptions{Force: true}); err != nil && !errors.Is(classify(err), port.ErrNotFound) {
			errs = append(errs, fmt.Errorf("remove proxy container: %w", err))
		}
	}
	audit, err := p.collected(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(p.dir); err != nil {
		errs = append(errs, fmt.Errorf("remove run dir: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return audit, opErr("Proxy.Stop", p.runID, err)
	}
	return audit, nil
}

// Sweep removes proxy containers and run directories of this manager's owner left by a
// host process that died (see Runner.Sweep). Implements port.Sweeper.
func (m *ProxyManager) Sweep(ctx context.Context, opts port.SweepOptions) (port.SweepReport, error) {
	rep, err := sweep(ctx, m.cfg, opts)
	if err != nil {
		return rep, err
	}
	base := filepath.Join(m.cfg.proxy.baseDir, m.cfg.owner)
	entries, err := os.ReadDir(base)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return rep, nil
		}
		return rep, opErr("Sweep", opts.RunID, err)
	}
	cutoff := time.Now().Add(-opts.OlderThan)
	for _, e := range entries {
		dir := filepath.Join(base, e.Name())
		var meta struct{ Owner, RunID, CreatedAt string }
		b, err := os.ReadFile(filepath.Join(dir, proxyMetaFile))
		if err != nil || json.Unmarshal(b, &struct {
			Owner     *string `json:"owner"`
			RunID     *string `json:"run_id"`
			CreatedAt *string `json:"created_at"`
		}{&meta.Owner, &meta.RunID, &meta.CreatedAt}) != nil || meta.Owner != m.cfg.owner {
			continue // not a directory this library made
		}
		if opts.RunID != "" && meta.RunID != opts.RunID {
			continue
		}
		if t, err := time.Parse(time.RFC3339Nano, meta.CreatedAt); err == nil && t.After(cutoff) {
			continue
		}
		rep.Removed = append(rep.Removed, "dir:"+dir)
		if !opts.DryRun {
			if err := os.RemoveAll(dir); err != nil {
				rep.Errors = append(rep.Errors, err)
			}
		}
	}
	return rep, nil
}

func unixClient(sock string) *http.Client {
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", sock)
			},
			DisableKeepAlives: true,
		},
	}
}

// collect opens the audit pipe and reads it until every writer has closed it.
func (p *nginxProxy) collect() error {
	fifo := filepath.Join(p.dir, "log", "audit.log")
	// Non-blocking opens: the read end first (no writer is needed), then the keeper
	// (a reader exists now). Reads still wait, in the runtime's poller.
	r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("audit pipe: %w", err)
	}
	w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		r.Close()
		return fmt.Errorf("audit pipe: %w", err)
	}
	p.auditR, p.keeper, p.done = r, w, make(chan struct{})
	go func() {
		defer close(p.done)
		pr := &pacedReader{r: r, every: auditPace}
		p.collectedAudit, p.collectErr = nginxconf.ReadAudit(pr, nginxconf.AuditLimits{MaxRecords: p.maxRecords()})
	}()
	return nil
}

// collected ends the audit pipe once nginx is gone and returns the records. It waits
// at most the cleanup timeout for the rest of the pipe.
func (p *nginxProxy) collected(ctx context.Context) ([]port.AuditRecord, error) {
	if p.done == nil {
		return nil, nil
	}
	p.keeper.Close()
	defer p.auditR.Close()
	t := time.NewTimer(p.m.cfg.cleanupTimeout)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		// A writer survived the container (it should not): stop reading.
		p.auditR.Close()
		<-p.done
	}
	a, err := p.collectedAudit, p.collectErr
	if err != nil {
		err = fmt.Errorf("audit log: %w", err)
	}
	if a == nil {
		return nil, err
	}
	for i := range a.Records {
		a.Records[i].RunID = p.runID
	}
	log := p.m.cfg.logger.With(logattr.RunID, p.runID)
	if a.Refused > 0 {
		log.InfoContext(ctx, "proxy refused requests", "refused", a.Refused)
	}
	if a.Dropped > 0 {
		log.WarnContext(ctx, "audit over its limit", "kept", len(a.Records), "dropped", a.Dropped)
		err = errors.Join(err, fmt.Errorf("%w: %d forwarded calls over the limit of %d have no record", ErrAuditTruncated, a.Dropped, p.maxRecords()))
	}
	return a.Records, err
}

func (p *nginxProxy) maxRecords() int {
	return cmp.Or(p.m.cfg.proxy.maxAuditRecords, nginxconf.DefaultMaxRecords)
}

// auditPace spaces the reads of an audit pipe, so that a busy proxy wakes the manager
// about two hundred times a second, not once per call. A pipe holds 64 KiB: at this pace
// nginx waits on it only beyond about 10 MB/s of audit, far above a flood's.
const auditPace = 5 * time.Millisecond

// pacedReader reads from r at most once per every.
type pacedReader struct {
	r     io.Reader
	every time.Duration
	last  time.Time
}

func (p *pacedReader) Read(b []byte) (int, error) {
	if d := p.every - time.Since(p.last); d > 0 {
		time.Sleep(d)
	}
	p.last = time.Now()
	return p.r.Read(b)
}
