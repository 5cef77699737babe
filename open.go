package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentsandbox/sandbox/adapters/inprocproxy"
	"github.com/agentsandbox/sandbox/adapters/litellmspend"
	"github.com/agentsandbox/sandbox/bridge"
	"github.com/agentsandbox/sandbox/litellm"
	"github.com/agentsandbox/sandbox/port"
)

// Environment variables Open reads when no option names LiteLLM.
const (
	// EnvLiteLLMURL is LiteLLM's base URL ("http://litellm:4000").
	EnvLiteLLMURL = "LITELLM_URL"
	// EnvLiteLLMMasterKey is a LiteLLM key that may create keys (its master key, or
	// an admin's): Open mints the proxies' route-restricted virtual key with it, and
	// the reconciler reads spend logs with it. It never reaches a proxy or a sandbox.
	EnvLiteLLMMasterKey = "LITELLM_MASTER_KEY"
)

// openConfig holds what only Open takes (WithOwner, WithBridge, WithLiteLLM,
// WithoutLLM) and what Open made for the Sandbox; nil on a Sandbox made by New.
type openConfig struct {
	owner      string
	bridge     string
	litellm    *liteLLMConfig // WithLiteLLM
	withoutLLM bool

	key *keyLease // the proxies' virtual key, shared with other Sandboxes of the owner

	closeOnce sync.Once
	closers   []func() error // what Open made, closed in reverse order
	closeErr  error
}

type liteLLMConfig struct{ url, masterKey string }

// openOnly makes an option that only Open takes: with New, the host gives the part
// it configures directly (the runner's owner, its bridge, the LLM access).
func openOnly(name string, set func(*openConfig) error) Option {
	return func(s *Sandbox) error {
		if s.open == nil {
			return port.Invalidf("sandbox.%s is an option of Open; with New, configure the part yourself (the runner's own options, WithLLM)", name)
		}
		return set(s.open)
	}
}

// WithOwner sets the owner Open gives everything it makes (the runtime's sandboxes,
// the proxies, the workspaces, the LiteLLM key's alias): sweeps only touch their
// owner's resources, so hosts sharing a runtime must use distinct owners. Default:
// DefaultOwner(). Open only.
func WithOwner(owner string) Option {
	return openOnly("WithOwner", func(c *openConfig) error {
		if err := validateOwner(owner); err != nil {
			return err
		}
		c.owner = owner
		return nil
	})
}

// WithBridge gives Open the in-sandbox bridge binary's host path (built with
// bridge.Build, or shipped: `CGO_ENABLED=0 go build
// github.com/agentsandbox/sandbox/cmd/sandbox-bridge`) instead of building it, for
// hosts without a Go toolchain. Open only.
func WithBridge(path string) Option {
	return openOnly("WithBridge", func(c *openConfig) error {
		fi, err := os.Stat(path)
		if err != nil || !filepath.IsAbs(path) || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return port.Invalidf("bridge %q is not an absolute path to an executable file", path)
		}
		c.bridge = path
		return nil
	})
}

// WithLiteLLM names the LiteLLM Open gives runs LLM access through, instead of
// LITELLM_URL and LITELLM_MASTER_KEY: its base URL and a key that may create keys
// (see EnvLiteLLMMasterKey). Open only.
func WithLiteLLM(url, masterKey string) Option {
	return openOnly("WithLiteLLM", func(c *openConfig) error {
		if url == "" || masterKey == "" {
			return port.Invalidf("WithLiteLLM: the URL and the master key are both required")
		}
		c.litellm = &liteLLMConfig{url: url, masterKey: masterKey}
		return nil
	})
}

// WithoutLLM says the Sandbox's runs have no LLM access, on purpose: Open then needs
// no LiteLLM, and a Request asking for LLM access (Model, Attribution, Budget,
// Reconcile, ...) is refused. Open only.
func WithoutLLM() Option {
	return openOnly("WithoutLLM", func(c *openConfig) error {
		c.withoutLLM = true
		return nil
	})
}

// Open returns a Sandbox on the runtime target names, with a working default for
// every part the options do not give:
//
//   - the runtime: target is "docker://" (DOCKER_HOST and friends),
//     "docker:///var/run/docker.sock", "containerd:///run/containerd/containerd.sock?namespace=ns",
//     "nomad://127.0.0.1:4646", "kubernetes://?kubeconfig=PATH&namespace=ns&pids=runtime"
//     (each adapter's Scheme says its queries), with the common query
//     runtime=runc|runsc|crun; "" picks what this host has (Docker, then
//     containerd; what `sandboxctl doctor` reports). The adapter must be imported
//     (it registers its scheme): _ "github.com/agentsandbox/sandbox/adapters/docker",
//     or adapters/all for every runtime. Open checks that the runtime answers;
//   - the in-sandbox bridge, built once per library version and cached
//     (bridge.Build; WithBridge gives a binary instead);
//   - LLM access: the in-process proxy (adapters/inprocproxy) per run, forwarding to
//     LiteLLM at LITELLM_URL with a virtual key that may call only the LLM routes,
//     minted with LITELLM_MASTER_KEY once per owner and shared by the Sandboxes of
//     that owner in this process (renewed before it expires; deleted by the last
//     Close), and the reconciler of LiteLLM's spend logs (adapters/litellmspend).
//     WithLiteLLM names LiteLLM instead; WithLLM and WithReconciler replace the
//     parts. Without LiteLLM, Open refuses (ErrInvalidSpec naming the variables)
//     unless WithoutLLM says the runs need none: a run never goes without LLM
//     access silently;
//   - per Request: a generated RunID when it has none (Result.RunID says which),
//     and a fresh workspace when it has no WorkspaceDir, made for the sandbox user
//     and removed when the run ends (the session stops); workspaces a crashed
//     process of the same owner left over a day ago are swept at Open;
//   - the owner of everything it makes: DefaultOwner() (WithOwner).
//
// New is the full-control path: every part given by the host, nothing made.
// Close releases what Open made. Errors: ErrInvalidSpec for a bad target or
// option, or missing LiteLLM; ErrUnavailable when the runtime or LiteLLM does not
// answer; each says what to do.
func Open(ctx context.Context, target string, opts ...Option) (_ *Sandbox, err error) {
	defer func() { err = withHint(err) }()
	s := newSandbox(nil)
	s.open = &openConfig{}
	if err := s.apply(opts); err != nil {
		return nil, fmt.Errorf("sandbox: open: %w", err)
	}
	c := s.open
	defer func() {
		if err != nil {
			_ = c.close()
		}
	}()
	if c.owner == "" {
		c.owner = DefaultOwner()
	}
	if c.withoutLLM && s.llm != nil {
		return nil, fmt.Errorf("sandbox: open: %w", port.Invalidf("WithoutLLM with WithLLM: say one"))
	}
	if c.withoutLLM && c.litellm != nil {
		return nil, fmt.Errorf("sandbox: open: %w", port.Invalidf("WithoutLLM with WithLiteLLM: say one"))
	}
	if s.llm != nil && c.litellm != nil {
		return nil, fmt.Errorf("sandbox: open: %w", port.Invalidf("WithLLM with WithLiteLLM: WithLLM already names the upstream and key"))
	}
	// The default LLM access and reconciler come unless the options say otherwise.
	if err := s.checkOptions(s.llm != nil || !c.withoutLLM, s.reconciler != nil || (s.llm == nil && !c.withoutLLM)); err != nil {
		return nil, fmt.Errorf("sandbox: open: %w", err)
	}
	if scheme, _, ok := strings.Cut(target, "://"); target != "" && (!ok || !slices.Contains(port.RuntimeDrivers(), scheme)) {
		// A target no driver takes: say so before building anything.
		_, err := port.OpenRuntime(ctx, target, port.RuntimeConfig{})
		return nil, fmt.Errorf("sandbox: open %q: %w", target, err)
	}
	if c.bridge == "" {
		if c.bridge, err = bridge.Build(ctx, ""); err != nil {
			return nil, fmt.Errorf("sandbox: open: %w (the bridge is built once per library version with the go command and cached; on a host without one, build it where there is one and pass it with sandbox.WithBridge)", err)
		}
	}
	rt, err := port.OpenRuntime(ctx, target, port.RuntimeConfig{Owner: c.owner, Bridge: c.bridge, Logger: s.logger})
	if err != nil {
		return nil, fmt.Errorf("sandbox: open %q: %w", target, err)
	}
	c.closers = append(c.closers, rt.Close)
	if err := rt.Ping(ctx); err != nil {
		return nil, fmt.Errorf("sandbox: open %q: %w (is it running, and is this its address? `sandboxctl doctor` shows what this host has)", target, err)
	}
	s.runner = rt
	if err := s.openLLM(ctx); err != nil {
		return nil, fmt.Errorf("sandbox: open: %w", err)
	}
	if _, err := SweepWorkspaces(ctx, "", c.owner, port.SweepOptions{OlderThan: workspaceSweepGrace}); err != nil {
		s.logger.Warn("sweeping left-over workspaces failed", "err", err)
	}
	s.init()
	return s, nil
}

// workspaceSweepGrace is how old a left-over workspace of the owner must be for
// Open to remove it: older than any run another process of the owner may still be
// doing in it.
const workspaceSweepGrace = 24 * time.Hour

// openLLM gives s its default LLM access, unless WithLLM gave it or WithoutLLM
// declined it.
func (s *Sandbox) openLLM(ctx context.Context) error {
	c := s.open
	if s.llm != nil || c.withoutLLM {
		return nil
	}
	lcfg := c.litellm
	if lcfg == nil {
		lcfg = &liteLLMConfig{url: os.Getenv(EnvLiteLLMURL), masterKey: os.Getenv(EnvLiteLLMMasterKey)}
		switch {
		case lcfg.url == "" && lcfg.masterKey == "":
			return port.Invalidf("no LLM access: set %s and %s (a LiteLLM and a key that may create keys), or give sandbox.WithLiteLLM or sandbox.WithLLM; sandbox.WithoutLLM if the agents need no LLM", EnvLiteLLMURL, EnvLiteLLMMasterKey)
		case lcfg.url == "":
			return port.Invalidf("%s is set but %s is not: set both, or give sandbox.WithLiteLLM", EnvLiteLLMMasterKey, EnvLiteLLMURL)
		case lcfg.masterKey == "":
			return port.Invalidf("%s is set but %s is not: the proxies' virtual key is minted with it", EnvLiteLLMURL, EnvLiteLLMMasterKey)
		}
	}
	lc, err := litellm.New(litellm.WithBaseURL(lcfg.url), litellm.WithMasterKey(lcfg.masterKey), litellm.WithLogger(s.logger))
	if err != nil {
		return fmt.Errorf("LiteLLM at %s: %w", lcfg.url, err)
	}
	if c.key, err = acquireKey(ctx, lc, lcfg, c.owner); err != nil {
		return err
	}
	c.closers = append(c.closers, c.key.release)
	proxies, err := inprocproxy.NewManager(inprocproxy.WithOwner(c.owner), inprocproxy.WithSandboxUID(defaultUID), inprocproxy.WithLogger(s.logger))
	if err != nil {
		return err
	}
	c.closers = append(c.closers, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return proxies.Shutdown(ctx)
	})
	s.llm = &LLM{Proxy: proxies, Upstream: lcfg.url, APIKey: c.key.current()}
	if s.reconciler == nil {
		if s.reconciler, err = litellmspend.NewReconciler(lc); err != nil {
			return err
		}
	}
	return nil
}

// defaultUID is the uid of port.DefaultUser, the only sandbox user the default
// proxies accept connections from (inprocproxy.WithSandboxUID).
const defaultUID = 1001

// Close releases what Open made: the proxies still running, the LiteLLM key (when
// no other Sandbox of the owner uses it), the runtime's clients. Runs and sessions
// still going lose their LLM access; close after them. It does nothing for a
// Sandbox made by New (the host closes the parts it gave). Close is idempotent.
func (s *Sandbox) Close() error {
	if s.open == nil {
		return nil
	}
	return s.open.close()
}

func (c *openConfig) close() error {
	c.closeOnce.Do(func() {
		var errs []error
		for i := len(c.closers) - 1; i >= 0; i-- {
			errs = append(errs, c.closers[i]())
		}
		c.closeErr = errors.Join(errs...)
	})
	return c.closeErr
}

// LoadImage loads an image archive (`docker save` output, or agentimage's
// Archive) into the runtime the Sandbox runs on and returns the names of the
// images it held: what Request.Image takes. Errors: those of the runtime's
// port.ImageLoader (ErrUnsupported, saying how, for a cluster whose nodes it cannot
// reach); ErrUnsupported for a runner that loads no images.
func (s *Sandbox) LoadImage(ctx context.Context, archive io.Reader) ([]string, error) {
	l, ok := s.runner.(port.ImageLoader)
	if !ok {
		return nil, withHint(fmt.Errorf("sandbox: load image: %w: the runner (%T) loads no images; load it with the runtime's own tools", port.ErrUnsupported, s.runner))
	}
	names, err := l.LoadImage(ctx, archive)
	if err != nil {
		return nil, withHint(fmt.Errorf("sandbox: load image: %w", err))
	}
	return names, nil
}

var ownerUnsafe = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// DefaultOwner is the owner Open uses unless WithOwner says otherwise: this
// program's name (its executable's base name, reduced to the owner alphabet), so
// a restarted host finds what it left and two programs on one runtime do not sweep
// each other's sandboxes; "default" when the name has nothing usable.
func DefaultOwner() string {
	name := ""
	if exe, err := os.Executable(); err == nil {
		name = filepath.Base(exe)
	} else if len(os.Args) > 0 {
		name = filepath.Base(os.Args[0])
	}
	name = strings.Trim(ownerUnsafe.ReplaceAllString(name, "-"), "-_.")
	if len(name) > 63 {
		name = strings.TrimRight(name[:63], "-_.")
	}
	if validateOwner(name) != nil {
		return port.DefaultOwner
	}
	return name
}

// NewRunID returns a fresh run ID: "run-", the UTC time to the second and 8
// random hex digits ("run-20261128T203600-1a2b3c4d"), valid by port.ValidateRunID
// and sorting by time. Open's Sandboxes give it to requests without a RunID.
func NewRunID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "run-" + time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b[:])
}
