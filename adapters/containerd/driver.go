package containerd

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"time"

	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/port"
)

// Scheme is the target scheme of containerd daemons:
// "containerd:///run/containerd/containerd.sock?namespace=ns" (the socket; the
// default address, $CONTAINERD_ADDRESS or DefaultAddress, when the path is empty:
// "containerd://"), with the query namespace= (default DefaultNamespace).
const Scheme = "containerd"

// QueryNamespace is the containerd target's namespace query parameter.
const QueryNamespace = "namespace"

func init() { port.RegisterRuntime(Scheme, driver{}) }

var _ port.Runtime = (*Runner)(nil)

// driver opens containerd targets (port.RuntimeDriver).
type driver struct{}

// Open implements port.RuntimeDriver: a Runner for target, with cfg's owner,
// logger, bridge and runtime.
func (driver) Open(_ context.Context, target *url.URL, cfg port.RuntimeConfig) (port.Runtime, error) {
	opts, err := targetOptions(target)
	if err != nil {
		return nil, err
	}
	if cfg.Owner != "" {
		opts = append(opts, WithOwner(cfg.Owner))
	}
	if cfg.Logger != nil {
		opts = append(opts, WithLogger(cfg.Logger))
	}
	if cfg.Bridge != "" {
		opts = append(opts, WithBridge(cfg.Bridge))
	}
	if cfg.Runtime != "" {
		opts = append(opts, WithRuntime(cfg.Runtime))
	}
	r, err := NewRunner(opts...)
	if err != nil {
		return nil, err // not a nil *Runner in a non-nil port.Runtime
	}
	return r, nil
}

// Detect implements port.RuntimeDriver: the daemon's version and address, and the
// OCI runtimes this host has for it (runc, crun, and runsc when its wrapper is
// installed).
func (driver) Detect(ctx context.Context, target *url.URL) (port.RuntimeInfo, error) {
	opts, err := targetOptions(target)
	if err != nil {
		return port.RuntimeInfo{}, err
	}
	r, err := NewRunner(opts...)
	if err != nil {
		return port.RuntimeInfo{}, err
	}
	defer r.Close()
	info := port.RuntimeInfo{Address: r.cfg.address}
	if _, err := os.Stat(r.cfg.address); err != nil {
		return info, fmt.Errorf("no socket at %s: %w", r.cfg.address, port.ErrUnavailable)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := r.reachable(); err != nil {
		return info, &runner.UnreachableError{Addr: info.Address, Err: err}
	}
	v, err := r.cli.Version(r.ns(ctx))
	if err != nil {
		return info, &runner.UnreachableError{Addr: info.Address, Err: err}
	}
	info.Version = v.Version
	info.Detail = fmt.Sprintf("containerd %s at %s", v.Version, info.Address)
	for _, rt := range []struct{ name, bin string }{{RuntimeRunc, RuntimeRunc}, {RuntimeCrun, RuntimeCrun}, {RuntimeRunsc, RuntimeRunscWrapper}} {
		if _, err := exec.LookPath(rt.bin); err == nil {
			info.Runtimes = append(info.Runtimes, rt.name)
		}
	}
	return info, nil
}

// targetOptions are the options a containerd:// target names.
func targetOptions(u *url.URL) ([]Option, error) {
	q, err := port.TargetQuery(u, QueryNamespace)
	if err != nil {
		return nil, err
	}
	if u.Host != "" {
		return nil, port.Invalidf("containerd target %s names a host: containerd listens on a unix socket, containerd:///run/containerd/containerd.sock", u.Redacted())
	}
	var opts []Option
	if u.Path != "" && u.Path != "/" {
		opts = append(opts, WithAddress(u.Path))
	}
	if q.Has(QueryNamespace) {
		opts = append(opts, WithNamespace(q.Get(QueryNamespace)))
	}
	return opts, nil
}
