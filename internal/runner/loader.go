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

// Set is an adapter's WithImageLoader: l, which must not be nil.
func (n *NodeImages) Set(adapter string, l port.ImageLoader) error {
	if l == nil {
		return port.Invalidf("%s: image loader is nil", adapter)
	}
	n.Loader = l
	return nil
}

// Load loads archive through the loader; without one it fails with
// port.ErrUnsupported and why (how to get an image onto the nodes instead).
func (n *NodeImages) Load(ctx context.Context, archive io.Reader, why string) ([]string, error) {
	if n.Loader == nil {
		return nil, fmt.Errorf("%w: %s", port.ErrUnsupported, why)
	}
	return n.Loader.LoadImage(ctx, archive)
}

// Close closes the loader the driver opened, if any.
func (n *NodeImages) Close() error {
	if n.Opened != nil {
		return n.Opened()
	}
	return nil
}
