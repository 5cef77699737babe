package containerd

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// makeSharedDir makes dir a mount point of its own with shared propagation, so a
// mount made on it later reaches the sandboxes that mounted it rslave.
func makeSharedDir(dir string) error {
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s: %w", dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
		_ = unix.Unmount(dir, unix.MNT_DETACH)
		return fmt.Errorf("make %s shared: %w", dir, err)
	}
	return nil
}

// attach mounts src on target (a shared mount point), read-only unless writable,
// always nosuid and nodev. The flags are set on a private staging mount first: a
// remount does not propagate, but a new mount carries its flags to every copy.
func attach(src, target, stage string, writable bool) error {
	if err := os.Mkdir(stage, 0o700); err != nil && !os.IsExist(err) {
		return err
	}
	defer os.Remove(stage)
	if err := unix.Mount(src, stage, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	defer unix.Unmount(stage, unix.MNT_DETACH)
	if err := unix.Mount("", stage, "", unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make %s private: %w", stage, err)
	}
	flags := uintptr(unix.MS_REMOUNT | unix.MS_BIND | unix.MS_NOSUID | unix.MS_NODEV)
	if !writable {
		flags |= unix.MS_RDONLY
	}
	if err := unix.Mount("", stage, "", flags, ""); err != nil {
		return fmt.Errorf("remount %s: %w", src, err)
	}
	if err := unix.Mount(stage, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("mount %s on %s: %w", src, target, err)
	}
	return nil
}

// unmountUnder detaches every mount at or under dir, deepest and latest first.
func unmountUnder(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	dir = filepath.Clean(dir)
	var points []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		p := unescapeMountinfo(fields[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	// Stable on length keeps stacked mounts in order; reversed, the top goes first.
	sort.SliceStable(points, func(i, j int) bool { return len(points[i]) < len(points[j]) })
	var first error
	for i := len(points) - 1; i >= 0; i-- {
		if err := unix.Unmount(points[i], unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT && first == nil {
			first = fmt.Errorf("unmount %s: %w", points[i], err)
		}
	}
	return first
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space, ...).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

const poolSupported = true
