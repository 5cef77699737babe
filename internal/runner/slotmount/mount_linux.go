//go:build linux

package slotmount

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// MakeShared makes dir a mount point of its own with shared propagation, so a
// mount made on it later reaches the sandboxes that mounted it rslave.
func MakeShared(dir string) error {
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s: %w", dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
		_ = unix.Unmount(dir, unix.MNT_DETACH)
		return fmt.Errorf("make %s shared: %w", dir, err)
	}
	return nil
}

// Attach mounts src on target (a shared mount point), read-only unless writable,
// always nosuid and nodev. The flags are set on a private staging mount first: a
// remount does not propagate, but a new mount carries its flags to every copy.
//
// With the mount API of Linux 5.12 and later this takes three system calls and no
// staging directory (attachDetached): the copy of src is made detached, its flags
// set there, and it is moved onto target. It is a claim's critical path.
func Attach(src, target, stage string, writable bool) error {
	if !NoNewMountAPI.Load() {
		err := attachDetached(src, target, writable)
		// ENOSYS: an older kernel; EPERM or EINVAL: a seccomp filter or a kernel that
		// knows the calls but not every attribute. The staged way works there.
		if err == nil || !(errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EINVAL)) {
			return err
		}
		NoNewMountAPI.Store(true)
	}
	return attachStaged(src, target, stage, writable)
}

// NoNewMountAPI is set once the kernel refused open_tree/mount_setattr/move_mount.
var NoNewMountAPI atomic.Bool

// attachDetached: open_tree clones src's tree detached, mount_setattr makes it private
// with its flags, move_mount attaches it on target, from where it propagates with
// those flags.
func attachDetached(src, target string, writable bool) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("clone %s: %w", src, err)
	}
	defer unix.Close(fd)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Propagation: unix.MS_PRIVATE}
	if !writable {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
		return fmt.Errorf("set flags on %s: %w", src, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mount %s on %s: %w", src, target, err)
	}
	return nil
}

// attachStaged is attach through a staging mount point, for kernels before 5.12.
func attachStaged(src, target, stage string, writable bool) error {
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

// UnmountUnder detaches every mount at or under dir, deepest and latest first.
func UnmountUnder(dir string) error {
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
		p := UnescapeMountinfo(fields[4])
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

// UnescapeMountinfo undoes mountinfo's octal escapes (\040 for a space, ...).
func UnescapeMountinfo(s string) string {
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

// Supported says this system has the mount propagation pools need.
const Supported = true

// RemoveDir unmounts everything under a slot directory and removes it.
func RemoveDir(dir string) error {
	if err := UnmountUnder(dir); err != nil {
		return err
	}
	// Never RemoveAll: a mount left by a failed unmount would lead it into a run's
	// data. The mount points are empty directories once unmounted, and Remove refuses
	// a busy one.
	ents, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	for _, e := range ents {
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	if err := os.Remove(dir); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}
