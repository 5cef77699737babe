// Command sandbox-llmproxy is one run's LLM proxy as a program of its own: the same
// engine as the in-process proxy (adapters/inprocproxy), serving a single run on a unix
// socket, for a proxy that lives beside its sandbox rather than in the host process
// (the Nomad runner's sidecar task).
//
//	sandbox-llmproxy -config FILE -socket PATH [-audit FILE] [-attestation FILE] [-sandbox-uid N] [-flush D]
//
// FILE holds the run's port.ProxySpec as JSON, key included; it is read once and
// removed (best effort). The socket's directory is created (mode 0755) and the socket
// made connectable by the sandbox user (0666). The audit records go to -audit as JSON
// lines, rewritten whole every -flush while records change and at the end, so a run's
// calls survive a proxy that is killed; the bridge's attestation goes to
// -attestation. SIGINT or SIGTERM stops the proxy: calls in flight get five seconds,
// then the final audit is written and the program exits 0.
//
// It is deliberately minimal (no admin API, one run): a shared proxy daemon can take
// its place as a sidecar as long as it serves the run on the socket and writes the
// audit where the runner reads it.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/agentsandbox/sandbox/adapters/inprocproxy"
	"github.com/agentsandbox/sandbox/port"
)

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("sandbox-llmproxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	config := fs.String("config", "", "JSON `file` with the run's proxy spec (removed once read)")
	socket := fs.String("socket", "", "unix socket `path` to serve on")
	audit := fs.String("audit", "", "`file` the audit records are written to, as JSON lines")
	attestation := fs.String("attestation", "", "`file` the bridge's attestation is written to")
	uid := fs.Int("sandbox-uid", -1, "accept connections only from this uid (and this process's own)")
	flush := fs.Duration("flush", time.Second, "how often the audit file is rewritten while records change")
	verbose := fs.Bool("v", false, "log diagnostics to stderr")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *config == "" || *socket == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: sandbox-llmproxy -config FILE -socket PATH [-audit FILE] [-attestation FILE] [-sandbox-uid N]")
		return 2
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	spec, key, err := readSpec(*config)
	if err != nil {
		log.Error("reading the config", "err", err)
		return 1
	}
	opts := []inprocproxy.Option{inprocproxy.WithLogger(log)}
	if *uid >= 0 {
		opts = append(opts, inprocproxy.WithSandboxUID(*uid))
	}
	m, err := inprocproxy.NewManager(opts...)
	if err != nil {
		log.Error("proxy", "err", err)
		return 1
	}
	if err := inprocproxy.ValidateSpec(spec); err != nil {
		log.Error("proxy spec", "err", err)
		return 1
	}
	if err := os.MkdirAll(filepath.Dir(*socket), 0o755); err != nil {
		log.Error("socket dir", "err", err)
		return 1
	}
	_ = os.Chmod(filepath.Dir(*socket), 0o755)
	_ = os.Remove(*socket)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: *socket, Net: "unix"})
	if err != nil {
		log.Error("listen", "err", err)
		return 1
	}
	if err := os.Chmod(*socket, 0o666); err != nil {
		log.Error("chmod socket", "err", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var serveOpts []inprocproxy.ServeOption
	if key != "" {
		serveOpts = append(serveOpts, inprocproxy.WithAttestKey(key))
	}
	p, err := m.Serve(ctx, spec, ln, serveOpts...)
	if err != nil {
		log.Error("serve", "err", err)
		return 1
	}
	log.Debug("serving", "run_id", spec.RunID, "socket", *socket)
	w := &writer{audit: *audit, attestation: *attestation, log: log}
	tick := time.NewTicker(*flush)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-tick.C:
			w.write(p.Audit(), p.Attestation())
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	records, err := p.Stop(sctx)
	if err != nil {
		log.Warn("stop", "err", err)
	}
	w.last = -1
	w.write(records, p.Attestation())
	return 0
}

// readSpec reads the run's proxy spec and its attestation key (the Nomad runner's
// SidecarConfig: the spec's fields and "attest_key"), and removes the file.
func readSpec(path string) (port.ProxySpec, string, error) {
	var cfg struct {
		port.ProxySpec
		AttestKey string `json:"attest_key"`
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return cfg.ProxySpec, "", err
	}
	// The key has no business staying on disk once it is in memory.
	_ = os.Remove(path)
	if err := json.Unmarshal(b, &cfg); err != nil {
		return cfg.ProxySpec, "", fmt.Errorf("%s is not a proxy spec: %w", path, err)
	}
	return cfg.ProxySpec, cfg.AttestKey, nil
}

// writer rewrites the audit and attestation files when they change, each renamed
// into place whole so a reader never sees half a file.
type writer struct {
	audit, attestation string
	last               int
	attested           bool
	log                *slog.Logger
}

func (w *writer) write(records []port.AuditRecord, a *port.Attestation) {
	if w.audit != "" && len(records) != w.last {
		var b []byte
		for _, r := range records {
			line, err := json.Marshal(r)
			if err != nil {
				continue
			}
			b = append(append(b, line...), '\n')
		}
		if err := writeFile(w.audit, b); err != nil {
			w.log.Error("writing the audit", "err", err)
		} else {
			w.last = len(records)
		}
	}
	if w.attestation != "" && a != nil && !w.attested {
		b, err := json.Marshal(a)
		if err == nil {
			err = writeFile(w.attestation, b)
		}
		if err != nil {
			w.log.Error("writing the attestation", "err", err)
		} else {
			w.attested = true
		}
	}
}

func writeFile(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
