package docker

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/port"
)

// Scheme is the target scheme of Docker engines: "docker://" (the engine the
// environment names: DOCKER_HOST and friends, as the docker CLI reads them),
// "docker:///var/run/docker.sock" (a unix socket), "docker://host:2375" (TCP).
const Scheme = "docker"

func init() { port.RegisterRuntime(Scheme, driver{}) }

var _ port.Runtime = (*Runner)(nil)

// driver opens Docker targets (port.RuntimeDriver).
type driver struct{}

// Open implements port.RuntimeDriver: a Runner for target, with cfg's owner,
// logger, bridge and runtime. It takes no query but runtime=.
func (driver) Open(_ context.Context, target *url.URL, cfg port.RuntimeConfig) (port.Runtime, error) {
	host, err := targetHost(target)
	if err != nil {
		return nil, err
	}
	var opts []Option
	if host != "" {
		opts = append(opts, WithHost(host))
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

// Detect implements port.RuntimeDriver: the engine's version, address, cgroup
// version and operating system, and the OCI runtimes registered with it.
func (driver) Detect(ctx context.Context, target *url.URL) (port.RuntimeInfo, error) {
	host, err := targetHost(target)
	if err != nil {
		return port.RuntimeInfo{}, err
	}
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if host != "" {
		opts = append(opts, client.WithHost(host))
	}
	cli, err := client.New(opts...)
	if err != nil {
		return port.RuntimeInfo{Address: host}, fmt.Errorf("%w: docker client: %v", port.ErrInvalidSpec, err)
	}
	defer cli.Close()
	info := port.RuntimeInfo{Address: cli.DaemonHost()}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return info, &runner.UnreachableError{Addr: info.Address, Err: err}
	}
	i := res.Info
	info.Version = i.ServerVersion
	info.Detail = fmt.Sprintf("Docker %s at %s (cgroup v%s, %s)", i.ServerVersion, info.Address, i.CgroupVersion, i.OperatingSystem)
	for name := range i.Runtimes {
		info.Runtimes = append(info.Runtimes, name)
	}
	sort.Strings(info.Runtimes)
	return info, nil
}

// targetHost is the daemon address a docker:// target names ("" for the
// environment's), refusing what it does not take.
func targetHost(u *url.URL) (string, error) {
	if _, err := port.TargetQuery(u); err != nil {
		return "", err
	}
	switch {
	case u.Host == "" && (u.Path == "" || u.Path == "/"):
		return "", nil
	case u.Host == "" && u.Path != "":
		return "unix://" + u.Path, nil
	case u.Path == "" || u.Path == "/":
		return "tcp://" + u.Host, nil
	}
	return "", port.Invalidf("docker target %s names both a host and a socket path: docker:///path/to/docker.sock or docker://host:port", u.Redacted())
}
