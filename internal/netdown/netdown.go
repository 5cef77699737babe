//go:build linux

// Package netdown empties a network namespace: it deletes every interface but lo
// (a veth's peer on the node goes with it) and checks that only lo and no route
// through anything else remain. The Kubernetes runner's Pods use it from their
// network init container (cmd/sandbox-kube-init netdown) or, on nodes whose
// RuntimeClass runs cmd/sandbox-kube-runtime, from that wrapper as it creates the
// agent's container, so the agent never starts with a network whatever the CNI.
package netdown

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Here empties the calling thread's network namespace. procNet is the namespace's
// /proc view of its routes: /proc/net for a process inside it, /proc/thread-self/net
// for a thread that entered it with setns.
func Here(procNet string) error {
	ifs, err := net.Interfaces()
	if err != nil {
		return err
	}
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		if err := delLink(ifc.Index); err != nil {
			return fmt.Errorf("deleting %s: %w", ifc.Name, err)
		}
	}
	ifs, err = net.Interfaces()
	if err != nil {
		return err
	}
	var names []string
	for _, ifc := range ifs {
		names = append(names, ifc.Name)
	}
	if len(names) != 1 || names[0] != "lo" {
		return fmt.Errorf("interfaces left: %v", names)
	}
	for _, name := range []string{"route", "ipv6_route"} {
		f := filepath.Join(procNet, name)
		b, err := os.ReadFile(f)
		if err != nil {
			continue // no IPv6 in this kernel
		}
		for i, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			fields := strings.Fields(l)
			if len(fields) == 0 || (name == "route" && i == 0) {
				continue
			}
			if dev := fields[len(fields)-1]; name == "route" && fields[0] != "lo" || name != "route" && dev != "lo" {
				return fmt.Errorf("a route is left in %s: %q", f, l)
			}
		}
	}
	return nil
}

// In empties the network namespace at path (a /proc/PID/ns/net or a bind mount of
// one) from a thread of its own that enters it; the calling thread's namespace is
// untouched (the entered thread is discarded, never reused).
func In(path string) error {
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the goroutine's end then ends its thread, which is in
		// another namespace.
		runtime.LockOSThread()
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("entering %s: %w", path, err)
			return
		}
		errc <- Here("/proc/thread-self/net")
	}()
	return <-errc
}

// delLink sends RTM_DELLINK for the interface index over rtnetlink and waits for the ack.
func delLink(index int) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	// struct nlmsghdr, then struct ifinfomsg (family AF_UNSPEC, the index).
	ne := binary.NativeEndian
	msg := make([]byte, 32)
	ne.PutUint32(msg[0:], uint32(len(msg)))
	ne.PutUint16(msg[4:], unix.RTM_DELLINK)
	ne.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	ne.PutUint32(msg[8:], 1)
	ne.PutUint32(msg[20:], uint32(int32(index)))
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return err
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if m.Header.Type == unix.NLMSG_ERROR && len(m.Data) >= 4 {
			if code := int32(ne.Uint32(m.Data[:4])); code != 0 {
				return syscall.Errno(-code)
			}
			return nil
		}
	}
	return errors.New("no netlink acknowledgement")
}
