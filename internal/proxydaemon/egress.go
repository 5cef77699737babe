package proxydaemon

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"

	api "github.com/agentsandbox/sandbox/api/proxydapi"
	"github.com/agentsandbox/sandbox/internal/egress"
	"github.com/agentsandbox/sandbox/internal/llmproxy"
	"github.com/agentsandbox/sandbox/internal/proxydaemon/portconv"
	"github.com/agentsandbox/sandbox/port"
)

// heldCredentials is a run's credential values, given at registration and held in
// memory only: the daemon cannot call the host's CredentialSource.
type heldCredentials map[[2]string]string

var errNoCredential = errors.New("no value was given at registration")

// Credential implements port.CredentialSource.
func (h heldCredentials) Credential(_ context.Context, _, provider, name string) (string, error) {
	v, ok := h[[2]string{provider, name}]
	if !ok {
		return "", errNoCredential
	}
	return v, nil
}

// compileEgress checks a registration's egress policy and credentials and
// compiles the policy with the values as its credential source. Errors wrap
// port.ErrInvalidSpec and never hold a value.
func compileEgress(er *api.EgressRegistration) (*egress.Policy, error) {
	pol := portconv.EgressPolicy(er.Policy)
	listed := map[[2]string]bool{}
	for _, p := range pol.Providers {
		for _, c := range p.Credentials {
			listed[[2]string{p.ID, c}] = true
		}
	}
	held := heldCredentials{}
	for _, c := range er.Credentials {
		k := [2]string{c.Provider, c.Name}
		if !listed[k] {
			return nil, port.Invalidf("egress: credential %q of provider %q is not one the policy lists", clip(c.Name), clip(c.Provider))
		}
		if _, dup := held[k]; dup {
			return nil, port.Invalidf("egress: credential %q of provider %q given twice", c.Name, c.Provider)
		}
		held[k] = c.Value
	}
	pol.Credentials = held
	return egress.Compile(&pol)
}

// withoutCredentials is rr as the registry may keep it: the egress policy
// without the credential values.
func withoutCredentials(rr api.RegisterRequest) api.RegisterRequest {
	if rr.Egress != nil {
		e := *rr.Egress
		e.Credentials = nil
		rr.Egress = &e
	}
	return rr
}

// startEgress serves the run's egress front in its directory, behind the same
// peer check and connection limits as its LLM socket.
func (r *run) startEgress() error {
	if r.egressPol == nil {
		return nil
	}
	f, err := r.s.cfg.Egress.StartFront(egress.FrontConfig{RunID: r.meter.RunID(), Policy: r.egressPol, Dir: r.dir, Logger: r.log,
		Wrap: func(l net.Listener) net.Listener {
			if r.uid >= 0 {
				l = &peerListener{Listener: l, allowed: []int{r.uid, os.Geteuid()}, log: r.log}
			}
			return &touchListener{Listener: llmproxy.LimitListener(l, r.s.cfg.ConnsPerRun, r.s.conns), r: r}
		}})
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.egress = f
	r.mu.Unlock()
	return nil
}

// stopEgress stops the egress front; requests in flight get until ctx ends.
func (r *run) stopEgress(ctx context.Context) {
	r.mu.Lock()
	f := r.egress
	r.mu.Unlock()
	if f != nil {
		f.Stop(ctx)
	}
}

// egressSummary is what the run's egress audit kept (nil without egress).
func (r *run) egressSummary() *port.EgressSummary {
	r.mu.Lock()
	f := r.egress
	r.mu.Unlock()
	if f == nil {
		return nil
	}
	s := f.Summary()
	return &s
}

// egressAudit is the run's egress records (nil without egress).
func (r *run) egressAudit() []port.EgressRecord {
	r.mu.Lock()
	f := r.egress
	r.mu.Unlock()
	if f == nil {
		return nil
	}
	return f.Audit()
}

// touchListener renews the run's registration on every egress connection.
type touchListener struct {
	net.Listener
	r *run
}

func (l *touchListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.r.s.reg.Touch(l.r.id)
	}
	return c, err
}

func (s *Server) egressRecords(w http.ResponseWriter, req *http.Request) {
	r := s.pathRun(w, req)
	if r == nil {
		return
	}
	recs := r.egressAudit()
	if recs == nil {
		recs = []port.EgressRecord{}
	}
	llmproxy.WriteJSON(w, http.StatusOK, api.EgressAudit{Records: portconv.WireEgressRecords(recs)})
}
