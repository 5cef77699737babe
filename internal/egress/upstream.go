package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"time"
)

// An upstream proxy that is handed a name resolves it again, and may get another
// answer than the one checked here (DNS rebinding through the second proxy). So the
// name never reaches it: the proxy resolves and checks the name itself and asks the
// upstream proxy to CONNECT to the checked address. The name travels only inside
// the tunnel (TLS server name, Host header), where it picks no address. Plain http
// goes through a CONNECT tunnel too; an upstream proxy that refuses CONNECT to a port
// refuses that destination, as nothing else can be pinned.

// dialUpstream connects to addr (a destination's host:port) through the upstream
// proxy, tunnelled to the checked address.
func (p *Proxy) dialUpstream(ctx context.Context, network, addr string) (net.Conn, error) {
	host, portS, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	addrs, err := p.checkedAddrs(ctx, host)
	if err != nil {
		return nil, err
	}
	var firstErr error
	for _, a := range addrs {
		c, err := p.connectVia(ctx, network, net.JoinHostPort(a.String(), portS))
		if err == nil {
			return c, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return nil, firstErr
}

// checkedAddrs resolves host (or parses a literal) and refuses it if any of its
// addresses is refused.
func (p *Proxy) checkedAddrs(ctx context.Context, host string) ([]netip.Addr, error) {
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		name, ip, err := ParseHost(host)
		if err != nil {
			return nil, err
		}
		if ip.IsValid() {
			addrs = []netip.Addr{ip}
		} else if addrs, err = p.cfg.Resolver.LookupNetIP(ctx, "ip", name); err != nil {
			return nil, err
		}
	}
	if len(addrs) == 0 {
		return nil, errors.New("egress: no address")
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		a = a.WithZone("").Unmap()
		if cl := p.cfg.Classifier.Classify(a); cl != ClassAllowed && cl != ClassAllowedByTest {
			return nil, &DenyError{Addr: a, Class: cl}
		}
		out = append(out, a)
	}
	return out, nil
}

// connectVia opens a CONNECT tunnel to ipPort (an address, never a name) through the
// upstream proxy.
func (p *Proxy) connectVia(ctx context.Context, network, ipPort string) (net.Conn, error) {
	c, err := (&net.Dialer{Timeout: dialTimeout}).DialContext(ctx, network, p.upstream)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(dialTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.SetDeadline(deadline)
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", ipPort, ipPort); err != nil {
		c.Close()
		return nil, err
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return nil, fmt.Errorf("egress: the upstream proxy answered CONNECT with %d", resp.StatusCode)
	}
	_ = c.SetDeadline(time.Time{})
	if n := br.Buffered(); n > 0 {
		pre, _ := br.Peek(n)
		return &prefixConn{Conn: c, pre: append([]byte(nil), pre...)}, nil
	}
	return c, nil
}
