package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// Class says why an address may or may not be dialled.
type Class string

// Address classes, in the order Classify tries them. The order follows Stripe's
// smokescreen (explicit allow ranges first, then not-global-unicast, then deny
// ranges, then private), with IPv4-mapped addresses unmapped and IPv6 transition
// forms checked through the IPv4 address they embed.
const (
	ClassAllowed       Class = ""                   // a public address
	ClassAllowedByTest Class = "allowed_by_test"    // an explicit test exception (AllowPrefixes)
	ClassNotGlobal     Class = "not_global_unicast" // loopback, link-local, multicast, unspecified, broadcast
	ClassReserved      Class = "reserved"           // CGNAT, benchmarking, documentation, 0/8, 240/4, ...
	ClassMetadata      Class = "cloud_metadata"     // instance metadata services
	ClassPrivate       Class = "private"            // RFC 1918, ULA
	ClassEmbedded      Class = "embeds_blocked_ipv4"
	ClassSelf          Class = "proxy_self" // one of the host's own addresses
	ClassInvalid       Class = "invalid"
)

var (
	metadataAddrs = []netip.Addr{
		netip.MustParseAddr("169.254.169.254"), // AWS, GCP, Azure, OpenStack, ...
		netip.MustParseAddr("169.254.170.2"),   // AWS ECS task metadata
		netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
		netip.MustParseAddr("192.0.0.192"),     // Oracle Cloud
		netip.MustParseAddr("fd00:ec2::254"),   // AWS IPv6
	}
	reservedPrefixes = mustPrefixes(
		"0.0.0.0/8", "100.64.0.0/10", "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24",
		"198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
		"100::/64", "2001::/23", "2001:db8::/32", "3fff::/20", "fec0::/10", "64:ff9b:1::/48", "5f00::/16",
	)
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
	teredo    = netip.MustParsePrefix("2001::/32")
	v4compat  = netip.MustParsePrefix("::/96")
)

func mustPrefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// Classifier decides which addresses the proxy may dial.
type Classifier struct {
	// Allow are explicit exceptions, for tests with loopback upstreams only.
	Allow []netip.Prefix
	// Self are the host's own addresses (the proxy never connects to itself).
	Self []netip.Addr
}

// Classify returns ClassAllowed or ClassAllowedByTest for an address the proxy may
// dial, and the reason otherwise.
func (c *Classifier) Classify(a netip.Addr) Class {
	if !a.IsValid() {
		return ClassInvalid
	}
	a = a.WithZone("").Unmap()
	for _, p := range c.Allow {
		if p.Contains(a) {
			return ClassAllowedByTest
		}
	}
	if a.Is6() {
		if v4, ok := embeddedIPv4(a); ok {
			for _, e := range v4 {
				if cl := c.Classify(e); cl != ClassAllowed {
					return ClassEmbedded
				}
			}
		}
	}
	for _, m := range metadataAddrs {
		if a == m {
			return ClassMetadata
		}
	}
	if !a.IsGlobalUnicast() || a.IsLoopback() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return ClassNotGlobal
	}
	for _, p := range reservedPrefixes {
		if p.Contains(a) {
			return ClassReserved
		}
	}
	if a.IsPrivate() {
		return ClassPrivate
	}
	for _, s := range c.Self {
		if s.WithZone("").Unmap() == a {
			return ClassSelf
		}
	}
	return ClassAllowed
}

// embeddedIPv4 returns the IPv4 addresses an IPv6 transition address carries: NAT64
// (64:ff9b::/96), 6to4 (2002::/16), Teredo (2001::/32: server and obfuscated client)
// and the deprecated IPv4-compatible form (::a.b.c.d).
func embeddedIPv4(a netip.Addr) ([]netip.Addr, bool) {
	b := a.As16()
	switch {
	case nat64.Contains(a):
		return []netip.Addr{netip.AddrFrom4([4]byte(b[12:16]))}, true
	case sixToFour.Contains(a):
		return []netip.Addr{netip.AddrFrom4([4]byte(b[2:6]))}, true
	case teredo.Contains(a):
		client := [4]byte{^b[12], ^b[13], ^b[14], ^b[15]}
		return []netip.Addr{netip.AddrFrom4([4]byte(b[4:8])), netip.AddrFrom4(client)}, true
	case v4compat.Contains(a) && a != netip.IPv6Unspecified() && a != netip.IPv6Loopback():
		return []netip.Addr{netip.AddrFrom4([4]byte(b[12:16]))}, true
	}
	return nil, false
}

// ParseHost normalises a URL or CONNECT host (without port): brackets and IPv6
// zones removed, every IPv4 spelling a resolver or browser would accept (decimal
// "2130706433", octal "0177.0.0.1", hex "0x7f.1", short "127.1", a trailing dot)
// turned into its address, names lower-cased without a trailing dot. ip is valid for
// an IP literal; name is set otherwise. A host that is neither is an error.
func ParseHost(h string) (name string, ip netip.Addr, err error) {
	if h == "" {
		return "", ip, errors.New("empty host")
	}
	if len(h) > 255 {
		return "", ip, errors.New("host too long")
	}
	if strings.HasPrefix(h, "[") || strings.HasSuffix(h, "]") {
		if !strings.HasPrefix(h, "[") || !strings.HasSuffix(h, "]") {
			return "", ip, errors.New("unbalanced brackets")
		}
		in := h[1 : len(h)-1]
		if i := strings.IndexByte(in, '%'); i >= 0 {
			in = in[:i] // a zone (also as %25) never picks another host
		}
		a, perr := netip.ParseAddr(in)
		if perr != nil || !a.Is6() {
			return "", ip, fmt.Errorf("bad IPv6 literal %q", h)
		}
		return "", a.Unmap(), nil
	}
	if strings.ContainsAny(h, "%:") {
		// Percent-escaped or unbracketed IPv6 hosts: only the plain forms are accepted.
		if a, perr := netip.ParseAddr(strings.SplitN(h, "%", 2)[0]); perr == nil && a.Is6() {
			return "", a.Unmap(), nil
		}
		return "", ip, fmt.Errorf("bad host %q", h)
	}
	h = strings.ToLower(h)
	trimmed := strings.TrimSuffix(h, ".")
	if trimmed == "" {
		return "", ip, errors.New("empty host")
	}
	labels := strings.Split(trimmed, ".")
	// As in the WHATWG URL standard: a host whose last label is numeric is an IPv4
	// address or nothing.
	if last := labels[len(labels)-1]; isNumericLabel(last) {
		a, ok := parseIPv4Loose(labels)
		if !ok {
			return "", ip, fmt.Errorf("bad IPv4 literal %q", h)
		}
		return "", a, nil
	}
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return "", ip, fmt.Errorf("bad host name %q", h)
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", ip, fmt.Errorf("bad host name %q", h)
			}
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return "", ip, fmt.Errorf("bad host name %q", h)
		}
	}
	return trimmed, ip, nil
}

func isNumericLabel(l string) bool {
	if l == "" {
		return false
	}
	if strings.HasPrefix(l, "0x") || strings.HasPrefix(l, "0X") {
		return true // "0x" alone is zero in inet_aton, hex digits checked by the parser
	}
	for i := 0; i < len(l); i++ {
		if l[i] < '0' || l[i] > '9' {
			return false
		}
	}
	return true
}

// parseIPv4Loose parses inet_aton's forms: a, a.b, a.b.c, a.b.c.d, each part decimal,
// octal (leading 0) or hex (0x), the last part filling the remaining bytes.
func parseIPv4Loose(parts []string) (netip.Addr, bool) {
	if len(parts) == 0 || len(parts) > 4 {
		return netip.Addr{}, false
	}
	vals := make([]uint64, len(parts))
	for i, p := range parts {
		base := 10
		s := p
		switch {
		case strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X"):
			base, s = 16, s[2:]
			if s == "" {
				s = "0"
			}
		case len(s) > 1 && s[0] == '0':
			base, s = 8, s[1:]
		}
		if s == "" {
			return netip.Addr{}, false
		}
		v, err := strconv.ParseUint(s, base, 32)
		if err != nil {
			return netip.Addr{}, false
		}
		vals[i] = v
	}
	var n uint64
	for i := 0; i < len(vals)-1; i++ {
		if vals[i] > 255 {
			return netip.Addr{}, false
		}
		n |= vals[i] << (24 - 8*uint(i))
	}
	last := vals[len(vals)-1]
	if last >= 1<<(8*uint(5-len(vals))) {
		return netip.Addr{}, false
	}
	n |= last
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), true
}

// Resolver looks names up; *net.Resolver implements it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// DenyError is a dial the classifier refused.
type DenyError struct {
	Addr  netip.Addr
	Class Class
}

func (e *DenyError) Error() string {
	return fmt.Sprintf("egress: address %s refused (%s)", e.Addr, e.Class)
}

// Dialer connects to upstreams: it resolves names itself (never through a proxy
// variable or the agent) and checks every address right before the connect system
// call (a net.Dialer Control hook), so DNS rebinding between check and connect
// cannot reach a refused address.
type Dialer struct {
	Classifier *Classifier
	Resolver   Resolver
	Timeout    time.Duration
	// dial is the connect step, for tests that must not open real connections.
	dial func(ctx context.Context, d *net.Dialer, network, addr string) (net.Conn, error)
}

// DialContext resolves addr's host and dials the first allowed address that answers.
func (d *Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	if a, perr := netip.ParseAddr(host); perr == nil {
		addrs = []netip.Addr{a}
	} else {
		name, ip, herr := ParseHost(host)
		if herr != nil {
			return nil, herr
		}
		if ip.IsValid() {
			addrs = []netip.Addr{ip}
		} else if addrs, err = d.Resolver.LookupNetIP(ctx, "ip", name); err != nil {
			return nil, err
		}
	}
	var firstErr error
	for _, a := range addrs {
		a = a.WithZone("").Unmap()
		if cl := d.Classifier.Classify(a); cl != ClassAllowed && cl != ClassAllowedByTest {
			if firstErr == nil {
				firstErr = &DenyError{Addr: a, Class: cl}
			}
			continue
		}
		nd := &net.Dialer{Timeout: d.Timeout, Control: d.control}
		target := net.JoinHostPort(a.String(), portStr)
		var c net.Conn
		if d.dial != nil {
			c, err = d.dial(ctx, nd, network, target)
		} else {
			c, err = nd.DialContext(ctx, network, target)
		}
		if err == nil {
			return c, nil
		}
		var de *DenyError
		if firstErr == nil || errors.As(err, &de) {
			firstErr = err
		}
	}
	if firstErr == nil {
		firstErr = fmt.Errorf("egress: no address for %s", host)
	}
	return nil, firstErr
}

// control re-checks the address the socket is about to connect to.
func (d *Dialer) control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &DenyError{Class: ClassInvalid}
	}
	if cl := d.Classifier.Classify(ap.Addr()); cl != ClassAllowed && cl != ClassAllowedByTest {
		return &DenyError{Addr: ap.Addr(), Class: cl}
	}
	return nil
}

// HostAddrs lists the host's own interface addresses (for Classifier.Self).
func HostAddrs() []netip.Addr {
	ifs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range ifs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr())
		}
	}
	return out
}

// denyFor turns a dial error into the agent's denial, if it is one.
func denyFor(err error, target string) *port.EgressDenial {
	var de *DenyError
	if errors.As(err, &de) {
		return &port.EgressDenial{Status: 403, Guard: port.GuardSSRF, Target: target, Message: "the destination resolves to a refused address (" + string(de.Class) + ")"}
	}
	return nil
}
