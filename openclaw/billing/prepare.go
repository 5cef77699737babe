package billing

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/agentsandbox/sandbox/internal/ctxsleep"
	"github.com/agentsandbox/sandbox/internal/logattr"
	"github.com/agentsandbox/sandbox/internal/optcheck"
	"github.com/agentsandbox/sandbox/openclaw"
	"github.com/agentsandbox/sandbox/openclaw/gateway"
	"github.com/agentsandbox/sandbox/port"
)

// Requester is the part of *gateway.Client a Preparer uses: typed config and
// session writes, gateway failures as *gateway.Error.
type Requester interface {
	ConfigGet(ctx context.Context) (*gateway.ConfigSnapshot, error)
	ConfigPatch(ctx context.Context, p gateway.ConfigPatch) (*gateway.ConfigPatchResult, error)
	SessionsPatch(ctx context.Context, key string, p gateway.SessionPatch) (*gateway.SessionPatchResult, error)
}

var _ Requester = (*gateway.Client)(nil)

// DefaultProviderPrefix starts the name of every per-run provider a Preparer adds.
const DefaultProviderPrefix = "sbx-run-"

// Retry bounds for gateway writes.
const (
	maxConflictRetries = 8
	maxUnanswered      = 2 // config.patch attempts left unanswered that did not land
	defaultWriteWait   = 20 * time.Second
	reloadPoll         = 250 * time.Millisecond
	defaultReloadWait  = time.Minute
	defaultRetryAfter  = time.Second
)

// Preparer prepares runs on a shared OpenClaw gateway for a Router: for each run it
// adds a provider whose baseUrl carries the run's token (config.patch, which the
// gateway hot-reloads) and points the run's session at it (sessions.patch model).
// Every LLM call of that session then reaches the router on the run's path. Release
// undoes both. Config writes are serialised, so one Preparer per gateway is enough.
//
// The gateway rate-limits config writes (30 config.patch a minute per client
// address in 2026.9.6); Prepare waits out the limit within its context, and Release
// folds provider removals into the next write.
type Preparer struct {
	gw         Requester
	routerURL  string
	models     map[string]openclaw.Model
	order      []string
	prefix     string
	writeWait  time.Duration
	reloadWait time.Duration
	log        *slog.Logger

	mu      sync.Mutex // one config write at a time: each needs the latest base hash
	pending map[string]bool
}

// PreparerOption configures a Preparer.
type PreparerOption func(*prepConfig) error

type prepConfig struct {
	prefix     string
	logger     *slog.Logger
	writeWait  time.Duration
	reloadWait time.Duration
}

// WithProviderPrefix sets the prefix of per-run provider names (default
// DefaultProviderPrefix): lowercase letters, digits and '-', at most 32 bytes.
func WithProviderPrefix(p string) PreparerOption {
	return func(c *prepConfig) error {
		if p == "" || len(p) > 32 || strings.Trim(p, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" || p[0] == '-' {
			return port.Invalidf("provider prefix %q: want 1-32 of [a-z0-9-], not starting with '-'", p)
		}
		c.prefix = p
		return nil
	}
}

// WithPreparerLogger sets the Preparer's logger (default: discard).
func WithPreparerLogger(l *slog.Logger) PreparerOption {
	return func(c *prepConfig) error { return optcheck.Set(&c.logger, l, l != nil, "nil logger") }
}

// WithConfigWriteWait bounds how long one config.patch may go unanswered (default
// 20 s; a write answers in well under a second). OpenClaw 2026.9.6 can leave a
// write unanswered when the hot reload it waits for is superseded by a newer one,
// although the write itself was made: after the wait the Preparer reads the config
// and goes on when the change is there, or writes again when it is not.
func WithConfigWriteWait(d time.Duration) PreparerOption {
	return func(c *prepConfig) error { return optcheck.Positive(&c.writeWait, d, "config write wait") }
}

// WithReloadWait bounds how long Prepare waits for the gateway to load a run's new
// provider after its config write (default 1 minute; well under a second on a quiet
// machine, over 10 s seen under load). Until then the gateway refuses the session's
// model as naming an unknown provider.
func WithReloadWait(d time.Duration) PreparerOption {
	return func(c *prepConfig) error { return optcheck.Positive(&c.reloadWait, d, "reload wait") }
}

// NewPreparer returns a Preparer that prepares runs on the gateway gw. routerURL is
// how the gateway reaches the Router ("http://127.0.0.1:4100"); models are the
// models each per-run provider offers (validated with openclaw.NewModel's rules).
// It does no I/O. Errors wrap port.ErrInvalidSpec.
func NewPreparer(gw Requester, routerURL string, models []openclaw.Model, opts ...PreparerOption) (*Preparer, error) {
	cfg := prepConfig{prefix: DefaultProviderPrefix, logger: slog.New(slog.DiscardHandler), writeWait: defaultWriteWait, reloadWait: defaultReloadWait}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if gw == nil {
		return nil, port.Invalidf("nil gateway")
	}
	u, err := url.Parse(routerURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, port.Invalidf("router URL %q is not an http(s) base URL", routerURL)
	}
	if len(models) == 0 {
		return nil, port.Invalidf("no models")
	}
	p := &Preparer{
		gw: gw, routerURL: strings.TrimSuffix(routerURL, "/"), models: map[string]openclaw.Model{},
		prefix: cfg.prefix, writeWait: cfg.writeWait, reloadWait: cfg.reloadWait, log: cfg.logger.With(logattr.Component, "billing.preparer"), pending: map[string]bool{},
	}
	for _, m := range models {
		if _, err := openclaw.NewModel(m.ID, m.Name, m.ContextWindow, m.MaxTokens); err != nil {
			return nil, err
		}
		if _, dup := p.models[m.ID]; dup {
			return nil, port.Invalidf("model %q listed twice", m.ID)
		}
		p.models[m.ID] = m
		p.order = append(p.order, m.ID)
	}
	return p, nil
}

// Session is a run's session prepared on the gateway.
type Session struct {
	// Key is the session's canonical key as the gateway names it
	// (e.g. "agent:main:<key>"): pass it as the agent request's SessionKey.
	Key string
	// Provider is the per-run provider's name.
	Provider string
	// ModelRef is "provider/model", the session's model now.
	ModelRef string
	// RunID is the run the session bills to.
	RunID string
}

// ProviderName is the name of the per-run provider for reg: the prefix and a hash
// of the token, so the name reveals neither the token nor the run.
func (p *Preparer) ProviderName(reg *Registration) string {
	sum := sha256.Sum256([]byte(reg.token))
	return p.prefix + hex.EncodeToString(sum[:10])
}

// Prepare readies sessionKey for the run of reg: it adds the run's provider
// (baseUrl reg.BaseURL(routerURL)) with a config.patch that also removes providers
// released earlier, waits for the gateway to load it, and sets the session's model
// to provider/modelID with sessions.patch, checking that the gateway resolved it to
// that provider. Register the run before Prepare and Stop it after Release.
//
// Errors: port.ErrInvalidSpec (empty key, unknown model), a *gateway.Error
// from the gateway, or ctx's error. On failure nothing stays pointed at the run's
// provider, and the provider is queued for removal.
func (p *Preparer) Prepare(ctx context.Context, reg *Registration, sessionKey, modelID string) (*Session, error) {
	if reg == nil || reg.fallback {
		return nil, port.Invalidf("prepare needs a registration of a run")
	}
	sessionKey = strings.TrimSpace(sessionKey)
	if sessionKey == "" {
		return nil, opErr("Prepare", reg.RunID(), port.Invalidf("empty session key"))
	}
	m, ok := p.models[modelID]
	if !ok {
		return nil, opErr("Prepare", reg.RunID(), port.Invalidf("model %q is not one of the preparer's models %v", modelID, p.order))
	}
	name := p.ProviderName(reg)
	// The apiKey is openclaw.PlaceholderAPIKey: OpenClaw sends it as
	// Authorization, the router strips it and injects the real key, which never
	// reaches the gateway.
	entry, err := openclaw.ProviderEntry(reg.BaseURL(p.routerURL), m)
	if err != nil {
		return nil, opErr("Prepare", reg.RunID(), err)
	}
	if err := p.writeProviders(ctx, map[string]any{name: entry}); err != nil {
		return nil, opErr("Prepare", reg.RunID(), err)
	}
	ref := name + "/" + modelID
	key, err := p.pointSession(ctx, sessionKey, ref, name)
	if err != nil {
		p.queueRemoval(name)
		return nil, opErr("Prepare", reg.RunID(), err)
	}
	p.log.Debug("billing: session prepared", "run_id", reg.RunID(), "session", key, "provider", name)
	return &Session{Key: key, Provider: name, ModelRef: ref, RunID: reg.RunID()}, nil
}

// pointSession sets the session's model, retrying while the gateway has not yet
// loaded the new provider (a refusal that names it), for up to the reload wait, and
// checks the provider it resolved to.
func (p *Preparer) pointSession(ctx context.Context, key, ref, provider string) (string, error) {
	var lastErr error
	for end := time.Now().Add(p.reloadWait); ; {
		out, err := p.gw.SessionsPatch(ctx, key, gateway.SessionPatch{Model: ref})
		if err == nil {
			if out.ModelProvider != provider {
				p.clearSession(ctx, key)
				return "", fmt.Errorf("%w: the gateway resolved session %q to provider %q, not %q", port.ErrInternal, key, out.ModelProvider, provider)
			}
			if out.Key == "" {
				return key, nil
			}
			return out.Key, nil
		}
		var ge *gateway.Error
		if !errors.As(err, &ge) || ge.Code != gateway.CodeInvalidRequest || !strings.Contains(ge.Message, provider) {
			return "", err
		}
		// The config reload may still be in flight: the provider is not known yet.
		lastErr = err
		if time.Now().After(end) {
			return "", fmt.Errorf("the gateway did not load the run's provider within %v: %w", p.reloadWait, lastErr)
		}
		if !ctxsleep.Sleep(ctx, reloadPoll) {
			return "", ctx.Err()
		}
	}
}

// clearSession resets a session to the gateway's default model, which reaches the
// router without a token and so is refused (or billed to the fallback). It runs
// even when ctx has ended: a session must not stay pointed at a run's provider.
func (p *Preparer) clearSession(ctx context.Context, key string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := p.gw.SessionsPatch(ctx, key, gateway.SessionPatch{ClearModel: true}); err != nil {
		p.log.Warn("billing: could not reset the session's model", "session", key, "err", err)
	}
}

// Release points the session back at the gateway's default model and removes the
// run's provider (folded with any other pending removals into one config write).
// Stop the run's registration as well: that revokes the token whatever the gateway
// does. A removal that fails stays queued for the next write (Prepare or Flush).
func (p *Preparer) Release(ctx context.Context, s *Session) error {
	if s == nil {
		return port.Invalidf("nil session")
	}
	var errs []error
	if _, err := p.gw.SessionsPatch(ctx, s.Key, gateway.SessionPatch{ClearModel: true}); err != nil {
		errs = append(errs, err)
	}
	if s.Provider != "" {
		p.queueRemoval(s.Provider)
	}
	if err := p.Flush(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return opErr("Release", s.RunID, err)
	}
	return nil
}

// Pending lists the providers queued for removal.
func (p *Preparer) Pending() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.pending))
	for n := range p.pending {
		out = append(out, n)
	}
	return out
}

// Flush removes the providers queued for removal with one config write; it does
// nothing when none are queued.
func (p *Preparer) Flush(ctx context.Context) error {
	return p.writeProviders(ctx, nil)
}

func (p *Preparer) queueRemoval(name string) {
	p.mu.Lock()
	p.pending[name] = true
	p.mu.Unlock()
}

// writeProviders adds providers and removes the pending ones with config.patch (a
// JSON merge patch: null deletes). It re-reads the base hash when another writer
// got in first, waits out the gateway's write rate limit, and checks the config
// itself when a write goes unanswered (WithConfigWriteWait).
func (p *Preparer) writeProviders(ctx context.Context, add map[string]any) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	providers := map[string]any{}
	removing := make([]string, 0, len(p.pending))
	for n := range p.pending {
		if _, readded := add[n]; !readded {
			providers[n] = nil
			removing = append(removing, n)
		}
	}
	for n, e := range add {
		providers[n] = e
	}
	if len(providers) == 0 {
		return nil
	}
	patch := gateway.ConfigPatch{Patch: map[string]any{"models": map[string]any{"providers": providers}}}
	for _, n := range removing {
		// The gateway refuses a patch that drops array entries (a removed
		// provider's models) unless the paths are named as intended.
		patch.ReplacePaths = append(patch.ReplacePaths, "models.providers."+n+".models")
	}
	for conflicts, unanswered := 0, 0; ; {
		snap, err := p.gw.ConfigGet(ctx)
		if err != nil {
			return err
		}
		patch.BaseHash = snap.Hash
		wctx, cancel := context.WithTimeout(ctx, p.writeWait)
		_, err = p.gw.ConfigPatch(wctx, patch)
		cancel()
		if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			landed, gerr := p.landed(ctx, add, removing)
			switch {
			case gerr != nil:
				return fmt.Errorf("%w (and reading the config to see whether it landed: %v)", err, gerr)
			case landed:
				p.log.Warn("billing: the gateway did not answer a config write, but its config has the change", "wait", p.writeWait)
				err = nil
			case unanswered < maxUnanswered:
				unanswered++
				p.log.Warn("billing: the gateway did not answer a config write, and its config lacks the change; writing again", "wait", p.writeWait)
				continue
			}
		}
		if err == nil {
			for _, n := range removing {
				delete(p.pending, n)
			}
			return nil
		}
		var ge *gateway.Error
		switch {
		case !errors.As(err, &ge):
			return err
		case errors.Is(err, gateway.ErrConfigChanged) && conflicts < maxConflictRetries:
			conflicts++ // someone else wrote the config since our config.get
		case ge.Retryable:
			d := ge.RetryAfter
			if d <= 0 {
				d = defaultRetryAfter
			}
			p.log.Info("billing: gateway config writes are rate-limited; waiting", "retry_after", d)
			if !ctxsleep.Sleep(ctx, d) {
				return fmt.Errorf("waiting for the gateway's config write limit: %w", ctx.Err())
			}
		default:
			return err
		}
	}
}

// landed reports whether the gateway's config has every provider of add and none
// of removing: provider names come from run tokens, so no other writer makes them.
func (p *Preparer) landed(ctx context.Context, add map[string]any, removing []string) (bool, error) {
	snap, err := p.gw.ConfigGet(ctx)
	if err != nil {
		return false, err
	}
	var cfg struct {
		Models struct {
			Providers map[string]json.RawMessage `json:"providers"`
		} `json:"models"`
	}
	if err := json.Unmarshal(snap.Config, &cfg); err != nil {
		return false, fmt.Errorf("gateway config.get: %w: %v", gateway.ErrMalformedFrame, err)
	}
	for n := range add {
		if _, ok := cfg.Models.Providers[n]; !ok {
			return false, nil
		}
	}
	for _, n := range removing {
		if _, ok := cfg.Models.Providers[n]; ok {
			return false, nil
		}
	}
	return true, nil
}

// ProbeOutboundHeaders reports whether the gateway accepts per-session outbound
// headers (the original system's patched fork does; upstream OpenClaw rejects the
// field as an unexpected property). It patches probeKey's session with an empty
// header map. With such a gateway, PrepareHeaders attributes a session without a
// per-run provider.
func ProbeOutboundHeaders(ctx context.Context, gw Requester, probeKey string) (bool, error) {
	_, err := gw.SessionsPatch(ctx, probeKey, gateway.SessionPatch{OutboundHeaders: map[string]string{}})
	if err == nil {
		return true, nil
	}
	if isUnexpectedOutboundHeaders(err) {
		return false, nil
	}
	return false, err
}

func isUnexpectedOutboundHeaders(err error) bool {
	var ge *gateway.Error
	return errors.As(err, &ge) && ge.Code == gateway.CodeInvalidRequest && strings.Contains(ge.Message, "outboundHeaders")
}

// PrepareHeaders readies a session on a gateway that accepts outboundHeaders (see
// ProbeOutboundHeaders): it sets the session's model to modelRef (a provider whose
// baseUrl is the router's plain /v1) and its outbound headers to the run's
// TokenHeader. On upstream OpenClaw it fails with an error wrapping
// port.ErrUnsupported; use Prepare there.
func (p *Preparer) PrepareHeaders(ctx context.Context, reg *Registration, sessionKey, modelRef string) (*Session, error) {
	if reg == nil || reg.fallback {
		return nil, port.Invalidf("prepare needs a registration of a run")
	}
	sessionKey, modelRef = strings.TrimSpace(sessionKey), strings.TrimSpace(modelRef)
	provider, _, ok := strings.Cut(modelRef, "/")
	if sessionKey == "" || !ok || provider == "" {
		return nil, opErr("PrepareHeaders", reg.RunID(), port.Invalidf("need a session key and a provider/model reference"))
	}
	out, err := p.gw.SessionsPatch(ctx, sessionKey, gateway.SessionPatch{
		Model: modelRef, OutboundHeaders: map[string]string{TokenHeader: reg.token},
	})
	if err != nil {
		if isUnexpectedOutboundHeaders(err) {
			return nil, opErr("PrepareHeaders", reg.RunID(), fmt.Errorf("%w: the gateway has no per-session outbound headers: %v", port.ErrUnsupported, err))
		}
		return nil, opErr("PrepareHeaders", reg.RunID(), err)
	}
	key := out.Key
	if key == "" {
		key = sessionKey
	}
	return &Session{Key: key, ModelRef: modelRef, RunID: reg.RunID()}, nil
}
