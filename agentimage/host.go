package agentimage

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

// NginxName is the repository of the image Nginx builds.
const NginxName = "agentsandbox/nginx"

// NginxJSModule is where Debian (libnginx-mod-http-js) and the nginx images keep
// nginx's JavaScript module; Nginx packs it at the same path.
const NginxJSModule = "/usr/lib/nginx/modules/ngx_http_js_module.so"

// Nginx packs the host's nginx binary (from PATH; Debian's nginx-light or nginx
// package), its JavaScript module (libnginx-mod-http-js) and the shared libraries
// they link into an image for the Docker adapter's
// nginx proxy manager (docker.WithProxyImage), so that proxy needs no registry:
//
//	img, err := agentimage.Nginx(ctx)
//	ref, archive, err := img.Open()
//	defer archive.Close()
//	err = dockerRunner.LoadImage(ctx, archive)
//	proxies, err := docker.NewProxyManager(docker.WithProxyImage(ref), ...)
//
// nginx is at /usr/sbin/nginx and on PATH; the image has the directories the proxy
// manager mounts and runs as whatever user the manager gives it.
func Nginx(ctx context.Context) (Image, error) {
	bin, err := exec.LookPath("nginx")
	if err != nil {
		return Image{}, fmt.Errorf("agentimage: nginx is not installed on the host (apt-get install nginx-light): %w", err)
	}
	files, err := HostBinary(ctx, bin, "/usr/sbin/nginx")
	if err != nil {
		return Image{}, err
	}
	// The per-run proxy's response header filter runs in nginx's JavaScript module.
	if _, err := os.Stat(NginxJSModule); err != nil {
		return Image{}, fmt.Errorf("agentimage: nginx's JavaScript module is not installed on the host (apt-get install libnginx-mod-http-js): %w", err)
	}
	mod, err := HostBinary(ctx, NginxJSModule, NginxJSModule)
	if err != nil {
		return Image{}, err
	}
	have := map[string]bool{}
	for _, f := range files {
		have[f.Path] = true
	}
	for _, f := range mod { // libc and the loader are nginx's too
		if !have[f.Path] {
			files, have[f.Path] = append(files, f), true
		}
	}
	files = WithDirs(files, "/etc/llmproxy", "/var/log/llmproxy", "/llm-sock")
	// World-writable like any /tmp: Docker gives the tmpfs mounted here this mode.
	files = append(files, File{Path: "/tmp", Mode: 0o777 | fs.ModeSticky, Dir: true})
	files = WithDirs(files, "/etc")
	files = append(files,
		File{Path: "/etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/:/usr/sbin/nologin\nnginx:x:101:101:nginx:/nonexistent:/usr/sbin/nologin\n")},
		File{Path: "/etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnginx:x:101:\n")},
	)
	return Image{
		Name:       NginxName,
		Entrypoint: []string{"/usr/sbin/nginx", "-g", "daemon off;"},
		Env:        []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"},
		Files:      files,
	}, nil
}

// HostBinary packs a dynamically linked host binary as target, with the shared
// libraries ldd reports at their host paths and every parent directory, for an image
// that runs a host program (nginx, node) without a distribution. ldd must be on PATH.
func HostBinary(ctx context.Context, bin, target string) ([]File, error) {
	bin, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return nil, err
	}
	out, err := exec.CommandContext(ctx, "ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("agentimage: ldd %s: %w", bin, err)
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
	var files []File
	for _, p := range paths {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return nil, err
		}
		if fi, err := os.Stat(real); err != nil || !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("agentimage: %s is not a regular file (%v)", real, err)
		}
		if p == bin {
			p = target
		}
		files = WithDirs(files, filepath.Dir(p))
		files = append(files, File{Path: p, Mode: 0o755, Source: real})
	}
	return files, nil
}

// WithDirs adds each directory and its parents (mode 0755) that files lacks.
func WithDirs(files []File, dirs ...string) []File {
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
			files = append(files, File{Path: missing[i], Mode: 0o755, Dir: true})
		}
	}
	return files
}
