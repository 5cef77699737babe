package main

import (
	"fmt"
	"os"
	"sync"

	"github.com/go-git/go-billy/v5"
)

// regularFS refuses to open anything but a regular file. A FIFO where git keeps a
// file (packed-refs, a loose ref, an object) would block the open until the export
// sandbox's timeout; a device or socket is no git file either. The first refusal is
// kept, because go-git may swallow the error it returns (a missing packed-refs is
// not an error to it), and the export is refused whatever go-git made of it.
type regularFS struct {
	billy.Filesystem
	seen *firstRefusal
}

type firstRefusal struct {
	mu sync.Mutex
	r  *refusal
}

func (f *firstRefusal) set(r *refusal) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.r == nil {
		f.r = r
	}
}

func (f *firstRefusal) get() *refusal {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.r
}

func newRegularFS(fs billy.Filesystem) *regularFS {
	return &regularFS{Filesystem: fs, seen: &firstRefusal{}}
}

func (fs *regularFS) check(name string) error {
	fi, err := fs.Filesystem.Stat(name) // follows symlinks, inside the bound tree
	if err != nil || fi.Mode().IsRegular() || fi.IsDir() {
		return nil // a missing file is the open's to report; a directory errors there too
	}
	r := &refusal{rule: "layout", path: ".git/" + name, msg: fmt.Sprintf(".git/%s is not a regular file (%s)", name, fi.Mode().Type())}
	fs.seen.set(r)
	return r
}

func (fs *regularFS) Open(name string) (billy.File, error) {
	if err := fs.check(name); err != nil {
		return nil, err
	}
	return fs.Filesystem.Open(name)
}

func (fs *regularFS) OpenFile(name string, flag int, perm os.FileMode) (billy.File, error) {
	if err := fs.check(name); err != nil {
		return nil, err
	}
	return fs.Filesystem.OpenFile(name, flag, perm)
}

func (fs *regularFS) Chroot(path string) (billy.Filesystem, error) {
	sub, err := fs.Filesystem.Chroot(path)
	if err != nil {
		return nil, err
	}
	return &regularFS{Filesystem: sub, seen: fs.seen}, nil
}
