package runner

import (
	"log/slog"

	"github.com/agentsandbox/sandbox/port"
)

// ConfigOptions appends to opts an adapter's options for the fields cfg sets, in
// the order owner, logger, bridge, runtime (the order their errors are reported in),
// and returns the result: what a local driver's Open gives its NewRunner besides the
// target's options. The four functions are the adapter's WithOwner, WithLogger,
// WithBridge and WithRuntime.
func ConfigOptions[O any](opts []O, cfg port.RuntimeConfig, owner func(string) O, logger func(*slog.Logger) O, bridge, runtime func(string) O) []O {
	if cfg.Owner != "" {
		opts = append(opts, owner(cfg.Owner))
	}
	if cfg.Logger != nil {
		opts = append(opts, logger(cfg.Logger))
	}
	if cfg.Bridge != "" {
		opts = append(opts, bridge(cfg.Bridge))
	}
	if cfg.Runtime != "" {
		opts = append(opts, runtime(cfg.Runtime))
	}
	return opts
}

// AsRuntime returns r as a port.Runtime, or nil with err: never a nil concrete
// runner in a non-nil interface. A driver's Open ends with AsRuntime(NewRunner(...)).
func AsRuntime[R port.Runtime](r R, err error) (port.Runtime, error) {
	if err != nil {
		return nil, err
	}
	return r, nil
}
