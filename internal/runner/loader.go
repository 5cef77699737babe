package runner

import (
	"context"
	"fmt"
	"io"

	"github.com/agentsandbox/sandbox/port"
)

// NodeImages is a cluster runner's way to its nodes' image store, which the
// cluster's API cannot reach: the loader WithImageLoader gave, and the Close of the
// one a target's load= query opened (see OpenCluster). The zero value has none.
type NodeImages struct {
	Loader port.ImageLoader
	// Opened closes the loader the driver opened (nil: the host's own loader).
	Opened func() error
}

// Set is an adapter's WithImageLoader: l, which must not be nil. A loader
// OpenCluster opened for the runner is the runner's to close.
func (n *NodeImages) Set(adapter string, l port.ImageLoader) error {
	if l == nil {
		return port.Invalidf("%s: image loader is nil", adapter)
	}
	if o, ok := l.(openedLoader); ok {
		n.Loader, n.Opened = o.ImageLoader, o.close
		return nil
	}
	n.Loader = l
	return nil
}

// openedLoader is a loader OpenCluster opened for the runner it makes, with its
// Close.
type openedLoader struct {
	port.ImageLoader
	close func() error
}

// Load loads archive through the loader; without one it fails with
// port.ErrUnsupported and why (how to get an image onto the nodes instead). Errors
// are in a *port.OpError of op ("nomad.LoadImage").
func (n *NodeImages) Load(ctx context.Context, op string, archive io.Reader, why string) ([]string, error) {
	if n.Loader == nil {
		return nil, OpErr(op, "", fmt.Errorf("%w: %s", port.ErrUnsupported, why))
	}
	names, err := n.Loader.LoadImage(ctx, archive)
	if err != nil {
		return nil, OpErr(op, "", err)
	}
	return names, nil
}

// Close closes the loader the driver opened, if any.
func (n *NodeImages) Close() error {
	if n.Opened != nil {
		return n.Opened()
	}
	return nil
}
