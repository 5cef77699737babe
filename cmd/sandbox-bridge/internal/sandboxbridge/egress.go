package sandboxbridge

import (
	"fmt"
	"net"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
)

// Egress defaults: the addresses of the bridge's wire contract (api/bridgeapi).
const (
	DefaultEgressListen = bridgeapi.EgressProxyAddr
	DefaultEgressSocket = bridgeapi.EgressSocketPath
)

// startEgress listens on cfg.Egress and pipes every connection to the egress proxy's
// socket, bytes untouched (the proxy on the host does everything else). It returns
// the function that stops it; nothing happens when cfg.Egress is empty.
func startEgress(cfg Config) (func(), error) {
	if cfg.Egress == "" || cfg.NoForward {
		return func() {}, nil
	}
	if err := checkLoopback(cfg.Egress); err != nil {
		return nil, err
	}
	sock := cfg.EgressSocket
	if sock == "" {
		sock = DefaultEgressSocket
	}
	ln, err := net.Listen("tcp", cfg.Egress)
	if err != nil {
		return nil, fmt.Errorf("bridge: listen on %s: %w", cfg.Egress, err)
	}
	fw := newForwarder(ln, sock, cfg.Logger)
	go fw.serve()
	return fw.close, nil
}
