package testimages

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// NginxImageName is the repository of the locally built nginx proxy image.
const NginxImageName = "agentsandbox/nginx"

// NginxImage packs the host's nginx binary and the shared libraries it links (as ldd
// reports them) into an image, so the Docker proxy adapter is tested against a real
// nginx with no registry. nginx is at /usr/sbin/nginx and on PATH.
func NginxImage(ctx context.Context) (Image, error) {
	bin, err := exec.LookPath("nginx")
	if err != nil {
		return Image{}, fmt.Errorf("testimages: nginx not installed: %w", err)
	}
	bin, err = filepath.EvalSymlinks(bin)
	if err != nil {
		return Image{}, err
	}
	out, err := exec.CommandContext(ctx, "ldd", bin).Output()
	if err != nil {
		return Image{}, fmt.Errorf("testimages: ldd %s: %w", bin, err)
	}
	paths := []string{bin}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		for _, f := range strings.Fields(sc.Text()) {
			if strings.HasPrefix(f, "/") {
				paths = append(paths, f)
			}
		}
	}
	files := []File{}
	dirs := map[string]bool{}
	addDirs := func(p string) {
		for d := filepath.Dir(p); d != "/" && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
			files = append(files, File{Path: d, Mode: 0o755, Dir: true})
		}
	}
	for _, p := range paths {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return Image{}, err
		}
		data, err := os.ReadFile(real)
		if err != nil {
			return Image{}, err
		}
		mode := fs.FileMode(0o755)
		target := p
		if p == bin {
			target = "/usr/sbin/nginx"
		}
		addDirs(target)
		files = append(files, File{Path: target, Mode: mode, Data: data})
	}
	for _, d := range []string{"/etc/llmproxy", "/var/log/llmproxy", "/llm-sock"} {
		if !dirs[d] {
			addDirs(d + "/x")
		}
	}
	// World-writable like any /tmp: Docker gives the tmpfs mounted here this mode.
	files = append(files, File{Path: "/tmp", Mode: 0o777 | fs.ModeSticky, Dir: true})
	addDirs("/etc/passwd")
	files = append(files,
		File{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/:/usr/sbin/nologin\nnginx:x:101:101:nginx:/nonexistent:/usr/sbin/nologin\n")},
		File{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnginx:x:101:\n")},
	)
	return Image{
		Name:       NginxImageName,
		Entrypoint: []string{"/usr/sbin/nginx", "-g", "daemon off;"},
		Env:        []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"},
		Files:      files,
	}, nil
}

// NginxArchive builds the nginx image archive.
func NginxArchive(ctx context.Context) (ref string, archive []byte, err error) {
	img, err := NginxImage(ctx)
	if err != nil {
		return "", nil, err
	}
	return Archive(img)
}
