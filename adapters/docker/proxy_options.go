package docker

import (
	"path/filepath"
	"time"

	"github.com/agentsandbox/sandbox/internal/runner"
	"github.com/agentsandbox/sandbox/port"
)

// Defaults of the nginx proxy manager.
const (
	DefaultProxyImage   = "nginx:alpine"
	DefaultProxyNetwork = "host"
)

// ProxyOption is Option.
//
// Deprecated: use Option; there is one option type.
type ProxyOption = Option

// proxyConfig holds the settings only the ProxyManager uses.
type proxyConfig struct {
	image        string
	network      string
	baseDir      string
	readyTimeout time.Duration
	// maxAuditRecords bounds the forwarded calls a proxy's audit keeps.
	maxAuditRecords int
	// unfilteredBodies is the caller's acknowledgement that nginx forwards request
	// bodies as the agent wrote them.
	unfilteredBodies bool
}

// WithProxyImage sets the nginx image (default "nginx:alpine", which must be pulled:
// the manager never pulls). The image must have nginx on PATH and nginx's JavaScript
// module at /usr/lib/nginx/modules/ngx_http_js_module.so (nginx:alpine and Debian's
// libnginx-mod-http-js keep it there): the proxy's response header filter runs in it.
// The manager supplies the whole command line and configuration. agentimage.Nginx
// builds one from the host's nginx with no registry; load it with Runner.LoadImage.
func WithProxyImage(ref string) Option {
	return only(ctorProxy, "WithProxyImage", func(c *config) error {
		if ref == "" {
			return port.Invalidf("proxy image is empty")
		}
		c.proxy.image = ref
		return nil
	})
}

// WithProxyNetwork sets the network the proxy containers join to reach the upstream
// (default "host", so an upstream on the host's loopback works). Sandboxes never join
// it: they reach the proxy only through its socket.
func WithProxyNetwork(name string) Option {
	return only(ctorProxy, "WithProxyNetwork", func(c *config) error {
		if name == "" {
			return port.Invalidf("proxy network is empty")
		}
		c.proxy.network = name
		return nil
	})
}

// WithProxyBaseDir sets the host directory under which per-run directories (socket,
// configuration with the key, audit log) are made. Default: the system temp dir.
func WithProxyBaseDir(dir string) Option {
	return only(ctorProxy, "WithProxyBaseDir", func(c *config) error {
		if !filepath.IsAbs(dir) {
			return port.Invalidf("proxy base dir %q is not absolute", dir)
		}
		c.proxy.baseDir = dir
		return nil
	})
}

// WithReadyTimeout bounds the wait for a new proxy to answer /health (default 15s).
func WithReadyTimeout(d time.Duration) Option {
	return only(ctorProxy, "WithReadyTimeout", func(c *config) error {
		if d <= 0 {
			return port.Invalidf("ready timeout %v is not positive", d)
		}
		c.proxy.readyTimeout = d
		return nil
	})
}

// WithMaxAuditRecords bounds the forwarded calls each proxy's audit keeps (default
// 50,000, far more than any real run makes). Stop fails with ErrAuditTruncated when a
// run made more.
func WithMaxAuditRecords(n int) Option {
	return only(ctorProxy, "WithMaxAuditRecords", func(c *config) error {
		if n <= 0 {
			return port.Invalidf("max audit records %d is not positive", n)
		}
		c.proxy.maxAuditRecords = n
		return nil
	})
}

// WithProxyBridge sets the host path of a static sandbox-bridge binary to run as each
// proxy's init: it ends nginx at the ProxySpec's Deadline even when the host that
// started the proxy is gone (killed before Stop). Without it a proxy runs until
// stopped or swept, and Start logs that at Warn when the spec has a deadline.
func WithProxyBridge(path string) Option {
	return only(ctorProxy, "WithProxyBridge", func(c *config) error { return runner.SetBridge(&c.bridgePath, path) })
}

// WithUnfilteredBodies acknowledges what the nginx proxy cannot do: read request
// bodies. The in-process proxy keeps an allowlist of body keys per route and sets the
// billing account as the body's user; nginx forwards the body as the agent wrote it,
// so fields such as user, metadata, api_base or mock_response reach LiteLLM, and
// depending on its version may move attribution or routing (see proxypolicy.Routes).
// Headers, routes and the key are still ours. Without this option Start refuses with
// port.ErrUnsupported; give it only where LiteLLM itself is trusted to ignore such
// fields (a virtual key restricted to LLM routes, a version that reads the end-user
// header first), or use the in-process proxy.
func WithUnfilteredBodies() Option {
	return only(ctorProxy, "WithUnfilteredBodies", func(c *config) error {
		c.proxy.unfilteredBodies = true
		return nil
	})
}
