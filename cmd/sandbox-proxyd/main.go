// Command sandbox-proxyd is the shared LLM proxy daemon: one process serving the
// per-run LLM proxies (and, for runs registered with an egress policy, their
// egress proxies) of many runs, with HMAC run tokens, per-run rate limits and
// a durable identity registry (see docs/proxyd.md).
//
//	sandbox-proxyd -state-dir /var/lib/agentsandbox-proxyd -socket-dir /run/agentsandbox-proxyd/runs \
//	    -admin-socket /run/agentsandbox-proxyd/admin.sock [-secret-file F] [-previous-secret-file F] [flags]
//
// The admin API (adapters/proxyd) listens on -admin-socket only (mode 0600; peers
// must run as the daemon's uid or an -admin-uid). Each registered run gets a
// directory under -socket-dir holding llm.sock and the run's token file; a runner
// mounts that directory at /llm-sock. SIGTERM and SIGINT stop the daemon without
// deregistering runs: started again with the same directories and secret, it
// serves the same runs at the same socket paths and their budgets continue.
//
// With -metrics-listen (a loopback host:port or unix:/path outside -socket-dir)
// the daemon serves Prometheus metrics at /metrics: LLM calls by outcome,
// refusals by rule, the GenAI client metrics (gen_ai_client_operation_duration_seconds,
// gen_ai_client_token_usage), the registered runs and the Go runtime's.
//
// With -upstream-key-file the daemon holds the upstream key itself (on Kubernetes a
// Secret mounted into the daemon's Pod alone): every run gets it and registrations
// must carry none, so the host application never has it.
//
// The secret file holds the token-signing secret as 64 hex digits; it is made
// (mode 0600) if missing. To rotate, move it to -previous-secret-file and let a
// new one be made: tokens of both are accepted.
package main

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	api "github.com/agentsandbox/sandbox/api/proxydapi"
	"github.com/agentsandbox/sandbox/internal/egress"
	"github.com/agentsandbox/sandbox/internal/proxydaemon"
	"github.com/agentsandbox/sandbox/internal/proxydaemon/identity"
	"github.com/agentsandbox/sandbox/internal/telemetry"
	"github.com/agentsandbox/sandbox/runtoken"
)

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

type uidList []int

func (u *uidList) String() string { return fmt.Sprint(*u) }
func (u *uidList) Set(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return fmt.Errorf("uid %q is not a non-negative integer", v)
	}
	*u = append(*u, n)
	return nil
}

// options are the daemon's flags.
type options struct {
	stateDir, socketDir, adminSock, secretFile, prevFile, keyFile string
	tokenTTL, ttl, gc                                             time.Duration
	rps, grps                                                     float64
	burst, streams, gburst                                        int
	network, rootsFile, upProxy, metricsAddr                      string
	unsafe                                                        prefixList
	admins                                                        uidList
	verbose                                                       bool
}

// parseFlags parses args; on a usage error it returns nil and the exit code.
func parseFlags(args []string, stderr io.Writer) (*options, int) {
	o := &options{}
	fs := flag.NewFlagSet("sandbox-proxyd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.stateDir, "state-dir", "/var/lib/agentsandbox-proxyd", "`directory` of the registry database")
	fs.StringVar(&o.socketDir, "socket-dir", "/run/agentsandbox-proxyd/runs", "`directory` of the per-run socket directories")
	fs.StringVar(&o.adminSock, "admin-socket", "/run/agentsandbox-proxyd/admin.sock", "admin API unix `socket`")
	fs.StringVar(&o.secretFile, "secret-file", "", "token secret `file` (default <state-dir>/secret; made if missing)")
	fs.StringVar(&o.prevFile, "previous-secret-file", "", "previous token secret `file`, still accepted (rotation)")
	fs.StringVar(&o.keyFile, "upstream-key-file", "", "`file` holding the upstream (LiteLLM) key the daemon injects into every run; registrations then carry none (re-read at each registration)")
	fs.DurationVar(&o.tokenTTL, "token-ttl", proxydaemon.DefaultTokenTTL, "run token lifetime")
	fs.DurationVar(&o.ttl, "ttl", identity.DefaultTTL, "registration lifetime without a request")
	fs.DurationVar(&o.gc, "gc-interval", identity.DefaultGCInterval, "how often expired registrations are removed")
	fs.Float64Var(&o.rps, "rate-rps", 0, "per-run calls per second (0: no limit)")
	fs.IntVar(&o.burst, "rate-burst", 0, "per-run burst of calls")
	fs.IntVar(&o.streams, "rate-streams", 0, "per-run calls in flight (0: no cap)")
	fs.Float64Var(&o.grps, "global-rps", 0, "calls per second of all runs together (0: no limit)")
	fs.IntVar(&o.gburst, "global-burst", 0, "burst of all runs together")
	fs.StringVar(&o.network, "listen-network", "", "TCP `address` on the sandboxes' internal network for runs registered by source IP (off by default)")
	fs.StringVar(&o.rootsFile, "egress-upstream-roots", "", "PEM `file` of CAs that egress upstreams are verified against instead of the system roots")
	fs.StringVar(&o.upProxy, "egress-upstream-proxy", "", "http:// `proxy` egress traffic goes through by default (a run's policy beats it)")
	fs.Var(&o.unsafe, "egress-unsafe-allow", "address `prefix` exempt from the egress SSRF guard (tests only; repeatable)")
	fs.Var(&o.admins, "admin-uid", "another `uid` allowed on the admin socket (repeatable)")
	fs.StringVar(&o.metricsAddr, "metrics-listen", "", "serve Prometheus metrics at /metrics on `unix:/path` or a loopback host:port (off by default; never a run socket)")
	fs.BoolVar(&o.verbose, "v", false, "log debug messages")
	if err := fs.Parse(args); err != nil {
		return nil, 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintln(stderr, "sandbox-proxyd: unexpected arguments")
		return nil, 2
	}
	if o.secretFile == "" {
		o.secretFile = filepath.Join(o.stateDir, "secret")
	}
	return o, 0
}

func run(args []string, stderr io.Writer) int {
	o, code := parseFlags(args, stderr)
	if o == nil {
		return code
	}
	level := slog.LevelInfo
	if o.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	keys, err := loadKeys(o.stateDir, o.secretFile, o.prevFile)
	if err != nil {
		log.Error("sandbox-proxyd: secret", "err", err)
		return 1
	}
	eh, err := egressHost(o.rootsFile, o.upProxy, o.unsafe)
	if err != nil {
		log.Error("sandbox-proxyd: egress", "err", err)
		return 2
	}
	var (
		tel      *telemetry.T
		mln      net.Listener
		mreg     *prometheus.Registry
		srvReady atomic.Pointer[proxydaemon.Server]
	)
	if o.metricsAddr != "" {
		if mln, err = metricsListener(o.metricsAddr, o.socketDir); err != nil {
			log.Error("sandbox-proxyd: metrics listener", "err", err)
			return 2
		}
		defer mln.Close()
		mp, reg, err := metricsProvider(func() int {
			if s := srvReady.Load(); s != nil {
				return s.Runs()
			}
			return 0
		})
		if err != nil {
			log.Error("sandbox-proxyd: metrics", "err", err)
			return 1
		}
		defer shutdownMetrics(mp)
		tel, mreg = telemetry.New(nil, mp), reg
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	srv, code := openServer(ctx, o, proxydaemon.Config{Keys: keys, Logger: log, Egress: eh, Telemetry: tel})
	if srv == nil {
		return code
	}
	ln, err := proxydaemon.ListenAdmin(o.adminSock)
	if err != nil {
		srv.Close()
		log.Error("sandbox-proxyd: admin socket", "err", err)
		return 1
	}
	log.Info("sandbox-proxyd: serving", "admin", o.adminSock, "sockets", o.socketDir, "runs", srv.Runs())
	errc := make(chan error, 3)
	go func() { errc <- srv.ServeAdmin(ln) }()
	if mln != nil {
		srvReady.Store(srv)
		log.Info("sandbox-proxyd: serving metrics", "addr", mln.Addr().String())
		go func() {
			if err := serveMetrics(mln, mreg); err != nil {
				errc <- fmt.Errorf("metrics: %w", err)
			}
		}()
	}
	if o.network != "" {
		nl, err := net.Listen("tcp", o.network)
		if err != nil {
			ln.Close()
			srv.Close()
			log.Error("sandbox-proxyd: network listener", "err", err)
			return 1
		}
		defer nl.Close()
		log.Info("sandbox-proxyd: serving network sandboxes", "addr", nl.Addr().String())
		go func() { errc <- srv.ServeNetwork(nl) }()
	}
	select {
	case <-ctx.Done():
	case err := <-errc:
		log.Error("sandbox-proxyd: admin", "err", err)
	}
	ln.Close()
	if err := srv.Close(); err != nil {
		log.Error("sandbox-proxyd: close", "err", err)
		return 1
	}
	log.Info("sandbox-proxyd: stopped; registered runs come back with the next start")
	return 0
}

// openServer opens the daemon's server on cfg completed from o; on failure it
// logs why and returns nil and the exit code (3: the registry database is corrupt).
func openServer(ctx context.Context, o *options, cfg proxydaemon.Config) (*proxydaemon.Server, int) {
	cfg.StateDir, cfg.SocketDir, cfg.TokenTTL, cfg.TTL, cfg.GCInterval = o.stateDir, o.socketDir, o.tokenTTL, o.ttl, o.gc
	cfg.Rate = api.RateLimit{RPS: o.rps, Burst: o.burst, Streams: o.streams}
	cfg.GlobalRPS, cfg.GlobalBurst, cfg.AdminUIDs, cfg.UpstreamKey = o.grps, o.gburst, o.admins, upstreamKey(o.keyFile)
	srv, err := proxydaemon.Open(ctx, cfg)
	if err != nil {
		if errors.Is(err, identity.ErrCorrupt) {
			cfg.Logger.Error("sandbox-proxyd: the registry database is corrupt; move it aside to start empty (its runs are lost)",
				"path", filepath.Join(o.stateDir, proxydaemon.DBName), "err", err)
			return nil, 3
		}
		cfg.Logger.Error("sandbox-proxyd: start", "err", err)
		return nil, 1
	}
	return srv, 0
}

// upstreamKey reads the daemon's upstream key from file at each call (nil without a
// file). Errors name the file, never its content.
func upstreamKey(file string) func() (string, error) {
	if file == "" {
		return nil
	}
	return func() (string, error) {
		fi, err := os.Stat(file)
		if err != nil {
			return "", err
		}
		if !fi.Mode().IsRegular() || fi.Size() > 4096 {
			return "", fmt.Errorf("%s is not a regular file of at most 4096 bytes", file)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return "", err
		}
		k := strings.TrimSpace(string(b))
		if k == "" || strings.ContainsFunc(k, func(r rune) bool { return r <= ' ' || r > '~' }) {
			return "", fmt.Errorf("%s holds no key (empty, or not printable ASCII without spaces)", file)
		}
		return k, nil
	}
}

type prefixList []netip.Prefix

func (p *prefixList) String() string { return fmt.Sprint(*p) }
func (p *prefixList) Set(v string) error {
	pr, err := netip.ParsePrefix(v)
	if err != nil {
		return fmt.Errorf("%q is not an address prefix", v)
	}
	*p = append(*p, pr)
	return nil
}

// egressHost is the egress configuration of every run's egress front.
func egressHost(rootsFile, upProxy string, unsafe []netip.Prefix) (egress.Host, error) {
	h := egress.Host{UnsafeAllow: unsafe}
	if rootsFile != "" {
		b, err := os.ReadFile(rootsFile)
		if err != nil {
			return h, err
		}
		h.Roots = x509.NewCertPool()
		if !h.Roots.AppendCertsFromPEM(b) {
			return h, fmt.Errorf("%s holds no PEM certificate", rootsFile)
		}
		h.RootsPEM = b
	}
	if upProxy != "" {
		u, err := egress.ParseUpstreamProxy(upProxy)
		if err != nil {
			return h, err
		}
		h.UpstreamProxy = u
	}
	return h, nil
}

// loadKeys reads the secrets, making the current one if it is missing.
func loadKeys(stateDir, cur, prev string) (runtoken.Keys, error) {
	var k runtoken.Keys
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return k, err
	}
	b, err := readSecret(cur)
	if errors.Is(err, os.ErrNotExist) {
		raw := make([]byte, 32)
		if _, err := rand.Read(raw); err != nil {
			return k, err
		}
		f, err := os.OpenFile(cur, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return k, err
		}
		if _, err := f.WriteString(hex.EncodeToString(raw) + "\n"); err != nil {
			f.Close()
			return k, err
		}
		if err := f.Close(); err != nil {
			return k, err
		}
		b = raw
	} else if err != nil {
		return k, err
	}
	k.Current = b
	if prev != "" {
		if k.Previous, err = readSecret(prev); err != nil {
			return k, err
		}
	}
	return k, nil
}

func readSecret(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("secret file %s is readable by others (mode %v); want 0600", path, fi.Mode().Perm())
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	b, err := hex.DecodeString(strings.TrimSpace(string(raw)))
	if err != nil || len(b) < runtoken.MinSecretLen {
		return nil, fmt.Errorf("secret file %s does not hold at least %d bytes as hex", path, runtoken.MinSecretLen)
	}
	return b, nil
}
