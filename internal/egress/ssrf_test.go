package egress

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/agentsandbox/sandbox/internal/egress/egresstest"
)

// TestSSRFLiteralSpellings: every spelling of an internal address is normalised
// before the check and refused.
func TestSSRFLiteralSpellings(t *testing.T) {
	c := &Classifier{}
	cases := []struct {
		host string
		want string // the normalised address
	}{
		{"127.0.0.1", "127.0.0.1"},
		{"2130706433", "127.0.0.1"},
		{"0177.0.0.1", "127.0.0.1"},
		{"0x7f.1", "127.0.0.1"},
		{"0x7f000001", "127.0.0.1"},
		{"127.1", "127.0.0.1"},
		{"127.0.1", "127.0.0.1"},
		{"127.0.0.1.", "127.0.0.1"},
		{"0177.1.", "127.0.0.1"},
		{"0", "0.0.0.0"},
		{"0.0.0.0", "0.0.0.0"},
		{"[::1]", "::1"},
		{"[::]", "::"},
		{"[::ffff:127.0.0.1]", "127.0.0.1"},
		{"[::ffff:7f00:1]", "127.0.0.1"},
		{"[fe80::1%25eth0]", "fe80::1"},
		{"[fe80::1%eth0]", "fe80::1"},
		{"fe80::1%eth0", "fe80::1"},
		{"[0:0:0:0:0:0:0:1]", "::1"},
		{"169.254.169.254", "169.254.169.254"},
		{"0xa9fea9fe", "169.254.169.254"},
		{"2852039166", "169.254.169.254"},
		{"10.1", "10.0.0.1"},
		{"012.0.0.1", "10.0.0.1"},
	}
	for _, tc := range cases {
		name, ip, err := ParseHost(tc.host)
		if err != nil || name != "" {
			t.Errorf("ParseHost(%q) = %q, %v, %v; want the address %s", tc.host, name, ip, err, tc.want)
			continue
		}
		if ip.String() != tc.want {
			t.Errorf("ParseHost(%q) = %s, want %s", tc.host, ip, tc.want)
		}
		if cl := c.Classify(ip); cl == ClassAllowed {
			t.Errorf("Classify(%s from %q) allowed", ip, tc.host)
		}
	}
	for _, bad := range []string{"", "[::1", "::1]", "256.0.0.1", "1.2.3.4.5", "0x", "08.0.0.1", "1.2.3.0x100", "a..b", "-a.b", "ex ample.com", "exa%6dple.com", "[example.com]", "1.2.3.4294967296"} {
		if name, ip, err := ParseHost(bad); err == nil && (name != "" || ip.IsValid()) {
			if bad == "0x" {
				continue // inet_aton reads "0x" as 0: an address, refused by the classifier
			}
			t.Errorf("ParseHost(%q) = %q, %v; want an error", bad, name, ip)
		}
	}
	for h, want := range map[string]string{"API.Example.COM": "api.example.com", "api.example.com.": "api.example.com", "x-1.example": "x-1.example"} {
		if name, _, err := ParseHost(h); err != nil || name != want {
			t.Errorf("ParseHost(%q) = %q, %v; want %q", h, name, err, want)
		}
	}
}

// TestSSRFRanges is the table: each range refused, with its class.
func TestSSRFRanges(t *testing.T) {
	c := &Classifier{Self: []netip.Addr{netip.MustParseAddr("93.184.216.77")}}
	refused := map[string]Class{
		"127.0.0.1": ClassNotGlobal, "127.255.255.254": ClassNotGlobal,
		"10.0.0.1": ClassPrivate, "172.16.0.1": ClassPrivate, "172.31.255.255": ClassPrivate, "192.168.1.1": ClassPrivate,
		"169.254.0.1": ClassNotGlobal, "169.254.169.254": ClassMetadata, "169.254.170.2": ClassMetadata,
		"100.64.0.1": ClassReserved, "100.127.255.255": ClassReserved, "100.100.100.200": ClassMetadata,
		"192.0.0.192": ClassMetadata,
		"fc00::1":     ClassPrivate, "fd12:3456::1": ClassPrivate, "fd00:ec2::254": ClassMetadata,
		"224.0.0.1": ClassNotGlobal, "239.255.255.250": ClassNotGlobal, "ff02::1": ClassNotGlobal,
		"0.0.0.0": ClassNotGlobal, "::": ClassNotGlobal, "255.255.255.255": ClassNotGlobal,
		"0.1.2.3": ClassReserved, "198.18.0.1": ClassReserved, "198.19.255.255": ClassReserved,
		"192.0.2.1": ClassReserved, "198.51.100.1": ClassReserved, "203.0.113.1": ClassReserved, "2001:db8::1": ClassReserved,
		"240.0.0.1": ClassReserved, "fe80::1": ClassNotGlobal, "::1": ClassNotGlobal,
		"::ffff:127.0.0.1": ClassNotGlobal, "::ffff:10.0.0.1": ClassPrivate, "::ffff:169.254.169.254": ClassMetadata,
		"::127.0.0.1": ClassEmbedded, "::10.0.0.1": ClassEmbedded,
		"64:ff9b::127.0.0.1": ClassEmbedded, "64:ff9b::a9fe:a9fe": ClassEmbedded, "64:ff9b::10.1.2.3": ClassEmbedded,
		"2002:7f00:1::": ClassEmbedded, "2002:a9fe:a9fe::1": ClassEmbedded, "2002:c0a8:101::1": ClassEmbedded,
		// Teredo: server 127.0.0.1, client obfuscated 10.0.0.1 (XOR 0xffffffff).
		"2001:0:7f00:1::f5ff:fffe": ClassEmbedded,
		"93.184.216.77":            ClassSelf,
	}
	for s, want := range refused {
		a := netip.MustParseAddr(s)
		if got := c.Classify(a); got != want {
			t.Errorf("Classify(%s) = %q, want %q", s, got, want)
		}
	}
	for _, s := range []string{"93.184.216.34", "8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1"} {
		if got := c.Classify(netip.MustParseAddr(s)); got != ClassAllowed {
			t.Errorf("Classify(%s) = %q, want allowed", s, got)
		}
	}
	// The explicit test exception comes first, as smokescreen's allow ranges do.
	ct := &Classifier{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	if got := ct.Classify(netip.MustParseAddr("127.0.0.1")); got != ClassAllowedByTest {
		t.Errorf("test exception: %q", got)
	}
	if got := ct.Classify(netip.MustParseAddr("10.0.0.1")); got != ClassPrivate {
		t.Errorf("test exception leaks: %q", got)
	}
}

// TestDialerRebinding: a name that resolves to a public address first and to
// 127.0.0.1 on the next lookup never reaches loopback: each dial resolves once and
// checks what it connects to.
func TestDialerRebinding(t *testing.T) {
	res := egresstest.NewResolver()
	pub := []netip.Addr{netip.MustParseAddr("93.184.216.34")}
	res.Set("rebind.test", pub, egresstest.Loopback)
	var dialled []string
	d := &Dialer{Classifier: &Classifier{}, Resolver: res,
		dial: func(ctx context.Context, nd *net.Dialer, network, addr string) (net.Conn, error) {
			// The control hook runs right before connect; run it as the kernel would.
			if err := nd.Control(network, addr, nil); err != nil {
				return nil, err
			}
			dialled = append(dialled, addr)
			c1, c2 := net.Pipe()
			c2.Close()
			return c1, nil
		}}
	c, err := d.DialContext(context.Background(), "tcp", "rebind.test:443")
	if err != nil {
		t.Fatalf("first dial: %v", err)
	}
	c.Close()
	_, err = d.DialContext(context.Background(), "tcp", "rebind.test:443")
	var de *DenyError
	if !errors.As(err, &de) || de.Class != ClassNotGlobal {
		t.Fatalf("second dial after rebinding: %v, want a refusal", err)
	}
	if len(dialled) != 1 || dialled[0] != "93.184.216.34:443" {
		t.Fatalf("dialled %v", dialled)
	}
	if n := res.Lookups("rebind.test"); n != 2 {
		t.Fatalf("lookups %d, want one per dial", n)
	}
	// The control hook alone refuses an internal address handed to it directly.
	if err := d.control("tcp", "127.0.0.1:80", nil); !errors.As(err, &de) {
		t.Fatalf("control hook: %v", err)
	}
	if err := d.control("tcp", "[::ffff:169.254.169.254]:80", nil); !errors.As(err, &de) || de.Class != ClassMetadata {
		t.Fatalf("control hook, mapped metadata: %v", err)
	}
	// Spelled literals reach the dialer normalised, and are refused.
	for _, h := range []string{"2130706433", "0x7f.1", "127.1"} {
		if _, err := d.DialContext(context.Background(), "tcp", h+":80"); !errors.As(err, &de) || !strings.Contains(err.Error(), "127.0.0.1") {
			t.Fatalf("dial %s: %v", h, err)
		}
	}
}
