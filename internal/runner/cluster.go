package runner

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/agentsandbox/sandbox/port"
)

// ClusterDriver is what a cluster adapter's driver (Nomad, Kubernetes) gives
// OpenCluster: its options for the host's configuration, its init and its image
// loader, and its runner's constructor. O is the adapter's Option, R its *Runner.
type ClusterDriver[O any, R port.Runtime] struct {
	// Name begins the init's build error ("nomad"); InitName says what the init is
	// ("the init").
	Name, InitName string
	// BuildInit builds the init into a directory (cached by content): the bridge's,
	// or DefaultDir's when the host gives no bridge (bridge.DefaultDir).
	BuildInit  func(ctx context.Context, dir string) (string, error)
	DefaultDir func() string
	// The adapter's WithOwner, WithLogger, WithRuntime, WithBridge, WithInit and
	// WithImageLoader (a NodeImages.Set: the runner closes the load= runtime it is
	// given).
	Owner                 func(string) O
	Logger                func(*slog.Logger) O
	Runtime, Bridge, Init func(string) O
	ImageLoader           func(port.ImageLoader) O
	// New is the adapter's NewRunner.
	New func(...O) (R, error)
}

// OpenCluster ends a cluster driver's Open: to opts (the target's) it adds the
// options for cfg's owner, logger, runtime and bridge (in that order, the order
// their errors are reported in), the init built next to the bridge, and the load=
// runtime (see OpenLoader), then makes the runner. The loader is closed again when
// the runner cannot be made; otherwise the runner's Close closes it.
func OpenCluster[O any, R port.Runtime](ctx context.Context, d ClusterDriver[O, R], opts []O, cfg port.RuntimeConfig, load string) (port.Runtime, error) {
	if cfg.Owner != "" {
		opts = append(opts, d.Owner(cfg.Owner))
	}
	if cfg.Logger != nil {
		opts = append(opts, d.Logger(cfg.Logger))
	}
	if cfg.Runtime != "" {
		opts = append(opts, d.Runtime(cfg.Runtime))
	}
	dir := ""
	if cfg.Bridge != "" {
		opts = append(opts, d.Bridge(cfg.Bridge))
		dir = filepath.Dir(cfg.Bridge)
	} else {
		dir = d.DefaultDir()
	}
	initBin, err := d.BuildInit(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("%s: building %s: %w", d.Name, d.InitName, err)
	}
	opts = append(opts, d.Init(initBin))
	loader, closeLoader, err := OpenLoader(ctx, load, cfg)
	if err != nil {
		return nil, err
	}
	if loader != nil {
		opts = append(opts, d.ImageLoader(openedLoader{ImageLoader: loader, close: closeLoader}))
	}
	r, err := d.New(opts...)
	if err != nil {
		if closeLoader != nil {
			_ = closeLoader()
		}
		return nil, err // not a nil *Runner in a non-nil port.Runtime
	}
	return r, nil
}
