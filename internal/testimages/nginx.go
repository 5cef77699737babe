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

	"github.com/agentsandbox/sandbox/agentimage"
)

// NginxImageName is the repository of the locally built nginx proxy image.
const NginxImageName = "agentsandbox/nginx"

// NginxImage packs the host's nginx binary and the shared libraries it links (as ldd
// reports them) into an image, so the Docker proxy adapter is tested against a real
// nginx with no registry. nginx is at /usr/sbin/nginx and on PATH.
func NginxImage(ctx context.Context) (agentimage.Image, error) {
	bin, err := exec.LookPath("nginx")
	if err != nil {
		return agentimage.Image{}, fmt.Errorf("testimages: nginx not installed: %w", err)
	}
	files, err := hostBinary(ctx, bin, "/usr/sbin/nginx")
	if err != nil {
		return agentimage.Image{}, err
	}
	files = withDirs(files, "/etc/llmproxy", "/var/log/llmproxy", "/llm-sock")
	// World-writable like any /tmp: Docker gives the tmpfs mounted here this mode.
	files = append(files, agentimage.File{Path: "/tmp", Mode: 0o777 | fs.ModeSticky, Dir: true})
	files = withDirs(files, "/etc")
	files = append(files,
		agentimage.File{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/:/usr/sbin/nologin\nnginx:x:101:101:nginx:/nonexistent:/usr/sbin/nologin\n")},
		agentimage.File{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnginx:x:101:\n")},
	)
	return agentimage.Image{
		Name:       NginxImageName,
		Entrypoint: []string{"/usr/sbin/nginx", "-g", "daemon off;"},
		Env:        []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"},
		Files:      files,
	}, nil
}

// hostBinary packs a dynamically linked host binary as target, with the shared
// libraries ldd reports at their host paths and every parent directory.
func hostBinary(ctx context.Context, bin, target string) ([]agentimage.File, error) {
	bin, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return nil, err
	}
	out, err := exec.CommandContext(ctx, "ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("testimages: ldd %s: %w", bin, err)
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
	var files []agentimage.File
	for _, p := range paths {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return nil, err
		}
		data, err := os.ReadFile(real)
		if err != nil {
			return nil, err
		}
		if p == bin {
			p = target
		}
		files = withDirs(files, filepath.Dir(p))
		files = append(files, agentimage.File{Path: p, Mode: 0o755, Data: data})
	}
	return files, nil
}

// withDirs adds each directory and its parents (mode 0755) that files lacks.
func withDirs(files []agentimage.File, dirs ...string) []agentimage.File {
	have := map[string]bool{"/": true}
	for _, f := range files {
		if f.Dir {
			have[f.Path] = true
		}
	}
	for _, d := range dirs {
		var missing []string
		for ; !have[d]; d = filepath.Dir(d) {
			have[d] = true
			missing = append(missing, d)
		}
		for i := len(missing) - 1; i >= 0; i-- {
			files = append(files, agentimage.File{Path: missing[i], Mode: 0o755, Dir: true})
		}
	}
	return files
}

// NginxArchive builds the nginx image archive.
func NginxArchive(ctx context.Context) (ref string, archive []byte, err error) {
	img, err := NginxImage(ctx)
	if err != nil {
		return "", nil, err
	}
	return img.Archive()
}
