package nomad

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/hashicorp/nomad/api"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/proxypolicy"
)

// sockPrefix starts the LLMSocket.Volume token of a sidecar proxy.
const sockPrefix = "nomad-sidecar-"

// Proxy is a run's LLM proxy as a Nomad sidecar. It implements port.Proxy and
// port.Attester.
//
// Start does not start anything: the proxy runs as a sidecar task in the job of each
// RunOnce whose spec carries its Socket, beside the sandbox on the same node, and
// stops with it. Each such run's audit records (read from the sidecar's private task
// directory when the run ends) are added to the proxy's; Stop returns them all.
type Proxy struct {
	r     *Runner
	spec  port.ProxySpec
	token string
	// attestKey is the run's attestation key: in the sidecar's configuration and
	// the bridge's environment, never the agent's.
	attestKey string

	mu          sync.Mutex
	records     []port.AuditRecord
	attestation *port.Attestation
	alloc       string // the allocation of the run in progress, if any
	stopped     bool
}

var (
	_ port.Proxy    = (*Proxy)(nil)
	_ port.Attester = (*Proxy)(nil)
)

// Start implements port.ProxyManager: it validates spec (as the in-process proxy
// does; errors wrap port.ErrInvalidSpec) and returns a proxy whose Socket a RunOnce of
// this runner turns into a sidecar task. Nothing is created on the cluster until then.
func (r *Runner) Start(ctx context.Context, spec port.ProxySpec) (port.Proxy, error) {
	if _, _, err := proxypolicy.ValidateSpec(spec); err != nil {
		return nil, opErr("Start", spec.RunID, err)
	}
	if err := r.ProxyCapabilities().Check(spec); err != nil {
		return nil, opErr("Start", spec.RunID, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, opErr("Start", spec.RunID, err)
	}
	p := &Proxy{r: r, spec: spec, token: sockPrefix + spec.RunID + "-" + randHex(6), attestKey: bridgeapi.NewAttestKey()}
	r.mu.Lock()
	r.proxies[p.token] = p
	r.mu.Unlock()
	return p, nil
}

// Socket implements port.Proxy. The token means nothing to other runners.
func (p *Proxy) Socket() port.LLMSocket {
	return port.LLMSocket{Volume: p.token, AttestKey: p.attestKey}
}

// SidecarConfig is what a Nomad sidecar proxy (cmd/sandbox-llmproxy) reads: the
// run's proxy spec and its attestation key.
type SidecarConfig struct {
	port.ProxySpec
	AttestKey string `json:"attest_key,omitempty"`
}

// RunID is the run this proxy serves.
func (p *Proxy) RunID() string { return p.spec.RunID }

// Audit returns a copy of the records of the runs finished so far.
func (p *Proxy) Audit() []port.AuditRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]port.AuditRecord(nil), p.records...)
}

// Attestation implements port.Attester: what the first run's bridge reported.
func (p *Proxy) Attestation() *port.Attestation {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.attestation
}

// Stop implements port.Proxy: later runs can no longer use the proxy, and the records
// of every run are returned. A run still in progress keeps its sidecar until it ends.
// Idempotent.
func (p *Proxy) Stop(context.Context) ([]port.AuditRecord, error) {
	p.r.mu.Lock()
	delete(p.r.proxies, p.token)
	p.r.mu.Unlock()
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	return p.Audit(), nil
}

func (p *Proxy) attach(alloc string) {
	p.mu.Lock()
	p.alloc = alloc
	p.mu.Unlock()
}

func (p *Proxy) detach() { p.attach("") }

// kill ends the sidecar of the run in progress abruptly (SIGKILL), as a crash would.
func (p *Proxy) kill(ctx context.Context) error {
	p.mu.Lock()
	id := p.alloc
	p.mu.Unlock()
	if id == "" {
		return fmt.Errorf("no run in progress")
	}
	a, _, err := p.r.api.Allocations().Info(id, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return err
	}
	return p.r.api.Allocations().Signal(a, (&api.QueryOptions{}).WithContext(ctx), sidecarTask, "SIGKILL")
}

// runSpec is the spec the run's sidecar gets: the proxy's, with the call budget
// reduced by the calls earlier runs of the proxy made.
func (p *Proxy) runSpec() (port.ProxySpec, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	spec := p.spec
	if spec.Budget.MaxCalls > 0 {
		used := 0
		for _, rec := range p.records {
			if rec.Blocked == "" && rec.Status != 0 {
				used++
			}
		}
		if spec.Budget.MaxCalls <= used {
			return spec, fmt.Errorf("%w: the proxy's %d calls were used by earlier runs", port.ErrBudgetExceeded, spec.Budget.MaxCalls)
		}
		spec.Budget.MaxCalls -= used
	}
	return spec, nil
}

// putProxyConfig stores the run's proxy configuration (key included) as a Nomad
// variable under the job's path, where the sidecar's template reads it. Variables are
// encrypted at rest by the servers; the rendered file lands in the sidecar's private
// secrets directory, which the sandbox task cannot see.
func (r *Runner) putProxyConfig(ctx context.Context, job string, p *Proxy) error {
	spec, err := p.runSpec()
	if err != nil {
		return err
	}
	b, err := json.Marshal(SidecarConfig{ProxySpec: spec, AttestKey: p.attestKey})
	if err != nil {
		return fmt.Errorf("%w: proxy config: %w", port.ErrInternal, err)
	}
	v := &api.Variable{Path: variablePath(job), Items: api.VariableItems{
		"config": string(b), "owner": r.cfg.owner, "run_id": spec.RunID,
	}}
	if r.cfg.namespace != "" {
		v.Namespace = r.cfg.namespace
	}
	if _, _, err := r.api.Variables().Create(v, (&api.WriteOptions{}).WithContext(ctx)); err != nil {
		return fmt.Errorf("storing the proxy's configuration: %w", classify(err))
	}
	return nil
}

// collect adds the finished run's audit records and attestation, read from the
// sidecar's task directory through Nomad's file system API.
func (p *Proxy) collect(ctx context.Context, r *Runner, alloc *api.Allocation) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.cleanupTimeout)
	defer cancel()
	recs, err := r.readFile(ctx, alloc, sidecarTask+"/"+sidecarAudit, maxAudit)
	if err != nil && !isNotFound(err) {
		r.cfg.logger.Warn("reading the proxy's audit failed", "alloc", alloc.ID, "err", err)
	}
	var got []port.AuditRecord
	sc := bufio.NewScanner(bytes.NewReader(recs))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var rec port.AuditRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			r.cfg.logger.Warn("a malformed audit line", "alloc", alloc.ID, "err", err)
			continue
		}
		got = append(got, rec)
	}
	var att *port.Attestation
	if b, err := r.readFile(ctx, alloc, sidecarTask+"/"+sidecarAttestation, 1<<20); err == nil && len(b) > 0 {
		var a port.Attestation
		if json.Unmarshal(b, &a) == nil {
			att = &a
		}
	}
	p.mu.Lock()
	p.records = append(p.records, got...)
	if p.attestation == nil {
		p.attestation = att
	}
	p.mu.Unlock()
}

// maxAudit bounds the audit file read back (records are a few hundred bytes each).
const maxAudit = 64 << 20
