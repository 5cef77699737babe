package nomad

import (
	"context"
	"fmt"
	"net/url"

	"github.com/agentsandbox/sandbox/bridge"
	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/port"
)

// Scheme is the target scheme of Nomad clusters: "nomad://127.0.0.1:4646" (the
// HTTP API; "nomad://" takes NOMAD_ADDR and friends, as the nomad CLI does), with
// the queries namespace=, region= and load= (the target of the runtime the client
// nodes load images from, URL-encoded: load=docker%3A%2F%2F for a one-machine
// cluster on this host's Docker engine; see WithImageLoader). The ACL token comes
// from NOMAD_TOKEN, never from the target.
//
// Runs get the bridge and the init (BuildInit, built next to the bridge) from this
// host's paths and host-path workspaces: the client nodes must see this host's
// paths (one machine, or shared storage).
const Scheme = "nomad"

// Query parameters of nomad:// targets.
const (
	QueryNamespace = "namespace"
	QueryRegion    = "region"
)

func init() { port.RegisterRuntime(Scheme, driver{}) }

// driver opens Nomad targets (port.RuntimeDriver).
type driver struct{}

// Open implements port.RuntimeDriver. It builds the init next to the bridge (cached
// by content) when cfg has a bridge, and opens the load= runtime.
func (driver) Open(ctx context.Context, target *url.URL, cfg port.RuntimeConfig) (port.Runtime, error) {
	q, err := port.TargetQuery(target, QueryNamespace, QueryRegion, runner.QueryLoad)
	if err != nil {
		return nil, err
	}
	if target.Path != "" && target.Path != "/" {
		return nil, port.Invalidf("nomad target %s has a path: nomad://host:port", target.Redacted())
	}
	var opts []Option
	if target.Host != "" {
		opts = append(opts, WithAddress("http://"+target.Host))
	}
	if q.Has(QueryNamespace) {
		opts = append(opts, WithNamespace(q.Get(QueryNamespace)))
	}
	if q.Has(QueryRegion) {
		opts = append(opts, WithRegion(q.Get(QueryRegion)))
	}
	return runner.OpenCluster(ctx, clusterDriver, opts, cfg, q.Get(runner.QueryLoad))
}

// clusterDriver is the rest of Open. The init keeps the agent's environment exactly
// the spec's and holds the task until Nomad has all of its output: without it a
// run's last output can be lost.
var clusterDriver = runner.ClusterDriver[Option, *Runner]{
	Name: "nomad", InitName: "the init", BuildInit: BuildInit, DefaultDir: bridge.DefaultDir,
	Owner: WithOwner, Logger: WithLogger, Runtime: WithRuntime, Bridge: WithBridge, Init: WithInit,
	ImageLoader: WithImageLoader, New: NewRunner,
}

// Detect implements port.RuntimeDriver: a cluster is never chosen without a target.
func (driver) Detect(context.Context, *url.URL) (port.RuntimeInfo, error) {
	return port.RuntimeInfo{}, fmt.Errorf("%w: a Nomad cluster is chosen by its target (nomad://host:port), never detected", port.ErrUnsupported)
}
