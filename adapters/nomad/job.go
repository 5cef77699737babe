package nomad

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/port"
)

// Names inside a run's job.
const (
	groupName   = "sandbox"
	agentTask   = "agent"
	sidecarTask = "llmproxy"

	// jobPrefix starts every job ID the runner submits.
	jobPrefix = "agentsandbox-"

	// Where the runner's binaries appear inside the sandbox.
	bridgeTarget = "/.agentsandbox/bridge"
	initTarget   = "/.agentsandbox/init"

	// sockSubdir is the directory in the allocation's shared directory that holds the
	// proxy's socket; it is mounted read-only at port.LLMSocketDir in the sandbox. It
	// must exist before the sandbox's container is created, which Nomad starts as soon
	// as the sidecar runs, not once it has made anything: Nomad's own tmp directory of
	// the allocation does.
	sockSubdir = "tmp"
	// Files in the sidecar's own task directory (local/ and secrets/ are private to
	// a task: the sandbox cannot see them).
	sidecarConfig      = "secrets/proxy.json"
	sidecarAudit       = "local/audit.jsonl"
	sidecarAttestation = "local/attestation.json"

	// sidecarUser runs the proxy: neither root nor the sandbox's user, so the sandbox
	// cannot write into the socket's directory through the shared /alloc.
	sidecarUser = "65534:65534"
	sidecarUID  = 65534
)

// logFile is the file where Nomad's log collection stores the first part of the
// sandbox task's stdout or stderr, relative to a task directory (../alloc is the
// allocation's shared directory). With the init, the whole capped stream: the file is
// sized to hold it (agentLogs).
func logFile(kind string) string { return "../alloc/logs/" + agentTask + "." + kind + ".0" }

// flushedTarget is where logFile(kind) is mounted read-only in the sandbox, for the
// init to see when Nomad has stored all it wrote (-flushed).
func flushedTarget(kind string) string { return "/.agentsandbox/" + kind }

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// jobID is unique per RunOnce; the run id stays readable in it.
func jobID(runID string) string { return jobPrefix + runID + "-" + randHex(4) }

// variablePath is where a run's proxy configuration (key included) waits for the
// sidecar's template: under the job's own path, which the job's workload identity may
// read when ACLs are on.
func variablePath(job string) string {
	return "nomad/jobs/" + job + "/" + groupName + "/" + sidecarTask
}

// jobSpec is what buildJob needs besides the RunSpec.
type jobSpec struct {
	id      string
	meta    map[string]string
	created time.Time
	proxy   bool // a sidecar proxy runs beside the sandbox
	// copyWorkspace says the workspace is copied (WithWorkspaceCopy); workspace is
	// its packed input.
	copyWorkspace bool
	workspace     []byte
}

func ptr[T any](v T) *T { return &v }

// buildJob turns a validated spec (with defaults) into a batch job of one group: the
// sandbox task, and the proxy's sidecar when the run has one.
func (r *Runner) buildJob(spec port.RunSpec, js jobSpec) *api.Job {
	job := &api.Job{
		ID:          ptr(js.id),
		Name:        ptr(js.id),
		Type:        ptr(api.JobTypeBatch),
		Datacenters: append([]string(nil), r.cfg.datacenters...),
		Meta:        js.meta,
		Priority:    ptr(50),
	}
	if r.cfg.namespace != "" {
		job.Namespace = ptr(r.cfg.namespace)
	}
	if r.cfg.region != "" {
		job.Region = ptr(r.cfg.region)
	}
	tg := &api.TaskGroup{
		Name:  ptr(groupName),
		Count: ptr(1),
		// A sandbox runs once: no restart, no reschedule on another node.
		RestartPolicy:    &api.RestartPolicy{Attempts: ptr(0), Mode: ptr("fail")},
		ReschedulePolicy: &api.ReschedulePolicy{Attempts: ptr(0), Unlimited: ptr(false)},
		// A client that loses the servers stops the sandbox itself after this (Nomad's
		// own answer to a partitioned node); a client that died cannot, and the
		// bridge's deadline inside ends the sandbox then.
		StopAfterClientDisconnect: ptr(StopAfterClientDisconnect),
		Meta:                      js.meta,
	}
	// Nomad wants the disk to hold every task's logs, with room to spare.
	files, fileMB := r.agentLogs(spec, js)
	disk := 10 + files*fileMB
	if js.proxy {
		disk += sidecarLogFiles * sidecarLogFileMB
	}
	tg.Tasks = append(tg.Tasks, r.agentTask(spec, js))
	if js.proxy {
		tg.Tasks = append(tg.Tasks, r.sidecar(spec, js))
	}
	if js.copyWorkspace {
		// The input rendered in the agent task's local/ (the template's copy too).
		disk += mib(int64(2 * len(js.workspace)))
	}
	tg.EphemeralDisk = &api.EphemeralDisk{SizeMB: ptr(disk)}
	job.TaskGroups = []*api.TaskGroup{tg}
	return job
}

// interpolated reports whether Nomad would interpolate part of a value: it expands
// ${...} in a task's environment (and in the driver's configuration).
func interpolated(v string) bool { return strings.Contains(v, "${") }

func (r *Runner) agentTask(spec port.RunSpec, js jobSpec) *api.Task {
	// One rule on every runner: the library's own variables win (port.RunSpec.SandboxEnv).
	env := spec.SandboxEnv()
	entrypoint, env := r.agentEntrypoint(spec, js, env)
	mounts := r.agentMounts(spec, js)
	labels := map[string]string{}
	for k, v := range js.meta {
		labels[k] = v
	}
	labels[port.LabelKind] = port.KindSandbox
	for k, v := range spec.Labels {
		labels[k] = v
	}
	logFiles, logFileMB := r.agentLogs(spec, js)
	cfg := map[string]any{
		"image":           spec.Image,
		"network_mode":    "none",
		"cap_drop":        []string{"ALL"},
		"security_opt":    []string{"no-new-privileges"},
		"readonly_rootfs": true,
		"pids_limit":      spec.Limits.PIDs,
		"ulimit":          []map[string]string{{"nofile": fmt.Sprintf("%d:%d", spec.Limits.OpenFiles, spec.Limits.OpenFiles)}},
		"hostname":        "sandbox",
		"ipc_mode":        "private",
		"labels":          []map[string]string{labels},
		"mount":           mounts,
		"force_pull":      false,
		// Docker's json-file driver (the default) replaces bytes that are not UTF-8
		// (which matters without the init's frames); the local driver keeps them.
		// Bounded: two files, each room for both streams' frames with the init.
		"logging": []map[string]any{{
			"type":   "local",
			"config": []map[string]string{{"max-size": itoa(logFileMB) + "m", "max-file": "2"}},
		}},
	}
	if len(entrypoint) > 0 {
		cfg["entrypoint"] = entrypoint
		cfg["args"] = []string{}
	}
	if spec.WorkspaceDir != "" {
		cfg["work_dir"] = port.WorkspacePath
	}
	if r.cfg.runtime != "" {
		cfg["runtime"] = r.cfg.runtime
	}
	res := &api.Resources{MemoryMB: ptr(mib(spec.Limits.MemoryBytes))}
	if spec.Limits.NanoCPUs > 0 {
		res.Cores = ptr(int(spec.Limits.NanoCPUs / 1e9))
	} else {
		res.CPU = ptr(r.cfg.cpuMHz)
	}
	// Nomad binds the allocation's shared directory and the task's local/ and
	// secrets/ (on the node's disk, 0777, no bound) wherever these variables say, and
	// no mount can cover them: at a path the runtime masks, they are hidden from the
	// sandbox (see hiddenAllocDir).
	env = maps.Clone(env)
	env["NOMAD_ALLOC_DIR"] = hiddenAllocDir
	env["NOMAD_TASK_DIR"] = hiddenTaskDir
	env["NOMAD_SECRETS_DIR"] = hiddenSecretsDir
	var templates []*api.Template
	kill := killTimeout
	if js.copyWorkspace {
		// The input, rendered in the task's own local/ (hidden; the one file is bound
		// read-only for the init to unpack), base64-encoded in the template: an
		// alphabet the template language cannot misread.
		templates = []*api.Template{{
			EmbeddedTmpl: ptr(`{{ base64Decode "` + base64.StdEncoding.EncodeToString(js.workspace) + `" }}`),
			DestPath:     ptr(workspaceTar),
			ChangeMode:   ptr("noop"),
			Perms:        ptr("0644"),
		}}
		// Stopped, the init still sends the workspace back.
		kill = exportKillTimeout
	}
	return &api.Task{
		Name:   agentTask,
		Driver: "docker",
		User:   spec.User,
		Config: cfg,
		Env:    env,
		Meta:   js.meta,
		// The sandbox's output: in the allocation's logs directory, which the sandbox
		// does not see (but for the two files it may read, with the init).
		LogConfig: &api.LogConfig{MaxFiles: ptr(logFiles), MaxFileSizeMB: ptr(logFileMB)},
		Resources: res,
		Templates: templates,
		// Stopped by Nomad (a sibling failed, the job was stopped): with the init, a
		// SIGTERM it answers by killing every process of the sandbox at once, then
		// exiting once Nomad has stored the output (killTimeout at most).
		KillTimeout: ptr(kill),
		KillSignal:  r.killSignal(),
	}
}

// agentEntrypoint is the agent task's command: the init (keeping env's names,
// capturing the output), the bridge's prefix, then the run's argv.
// hiddenAllocDir is where the agent task's allocation directory is bound: a path
// Docker's default profile masks (runc mounts a read-only, empty tmpfs over it after
// every other mount), so the sandbox neither sees nor writes the directory. The
// sandbox needs nothing of it: the socket directory and a copied workspace reach it
// through binds of their own. The init refuses to start the run if the path is
// writable (a runtime that does not mask it).
const hiddenAllocDir = "/sys/firmware"

// hiddenTaskDir and hiddenSecretsDir are where the agent task's local/ and secrets/
// are bound: over two directories the allocation directory always has (data, tmp),
// under the same mask. Nothing is created on the node for them, and the sandbox sees
// neither: it writes nothing there (its output goes to the task's own streams, capped
// by the init) and needs nothing of them.
const (
	hiddenTaskDir    = hiddenAllocDir + "/data"
	hiddenSecretsDir = hiddenAllocDir + "/tmp"
)

func (r *Runner) agentEntrypoint(spec port.RunSpec, js jobSpec, env map[string]string) ([]string, map[string]string) {
	llm := spec.LLM != nil
	var entrypoint []string
	if r.cfg.initPath != "" {
		names := make([]string, 0, len(env))
		var encoded []string
		for k, v := range env {
			names = append(names, k)
			if interpolated(v) {
				// Nomad would expand ${...} in the value: it travels base64-encoded
				// and the init decodes it, so the agent gets it verbatim.
				encoded = append(encoded, k)
			}
		}
		sort.Strings(names)
		sort.Strings(encoded)
		entrypoint = append(entrypoint, initTarget)
		if len(encoded) > 0 {
			env = maps.Clone(env)
			for _, k := range encoded {
				env[k] = base64.StdEncoding.EncodeToString([]byte(env[k]))
			}
			entrypoint = append(entrypoint, "-b64", strings.Join(encoded, ","))
		}
		if js.copyWorkspace {
			entrypoint = append(entrypoint, "-unpack", workspaceTarTarget, "-into", port.WorkspacePath,
				"-export", port.WorkspacePath, "-export-max", strconv.FormatInt(exportMax(spec), 10), "-export-files", itoa(MaxWorkspaceFiles))
		}
		entrypoint = append(entrypoint, "-unwritable", strings.Join([]string{hiddenAllocDir, hiddenTaskDir, hiddenSecretsDir}, ","),
			"-keep", strings.Join(names, ","), "-capture", "-max", itoa(spec.OutputLimit),
			"-flushed", flushedTarget("stdout")+","+flushedTarget("stderr"))
		if llm {
			entrypoint = append(entrypoint, "-wait", port.LLMSocketDir+"/"+port.LLMSocketName)
		}
		entrypoint = append(entrypoint, "--")
	}
	if r.cfg.bridgePath != "" {
		prefix := bridgeapi.Prefix(bridgeTarget, llm, spec.Limits.Timeout, js.created)
		if r.cfg.initPath != "" {
			// The init is PID 1: the bridge reaps the agent's orphans as a subreaper.
			prefix = append([]string{prefix[0], "-subreaper"}, prefix[1:]...)
		}
		entrypoint = append(entrypoint, prefix...)
	}
	return append(entrypoint, spec.Argv...), env
}

// agentMounts is what the agent task mounts: tmpfs /tmp and /run, an empty
// resolv.conf, the workspace, the run's mounts, the LLM socket directory, the
// bridge and the init.
func (r *Runner) agentMounts(spec port.RunSpec, js jobSpec) []map[string]any {
	llm := spec.LLM != nil
	tmpfs := func(target string) map[string]any {
		return map[string]any{
			"type": "tmpfs", "target": target, "readonly": false,
			"tmpfs_options": map[string]any{"size": spec.Limits.TmpfsBytes},
		}
	}
	bind := func(src, target string, ro bool) map[string]any {
		return map[string]any{"type": "bind", "source": src, "target": target, "readonly": ro}
	}
	// Docker gives even a container without a network the host's resolv.conf; an
	// empty file replaces it (a template would slow every start down).
	mounts := []map[string]any{tmpfs("/tmp"), tmpfs("/run"), bind(os.DevNull, "/etc/resolv.conf", true)}
	// The allocation's shared directory is hidden (see hiddenAllocDir): no /alloc.
	switch {
	case js.copyWorkspace:
		mounts = append(mounts, workspaceMount(spec, js), bind(workspaceTar, workspaceTarTarget, true))
	case spec.WorkspaceDir != "":
		mounts = append(mounts, bind(spec.WorkspaceDir, port.WorkspacePath, false))
	}
	for _, m := range spec.Mounts {
		mounts = append(mounts, bind(m.Source, m.Target, !m.Writable))
	}
	if llm {
		if spec.LLM.HostDir != "" {
			mounts = append(mounts, bind(spec.LLM.HostDir, port.LLMSocketDir, true))
		} else {
			// Relative to the task directory: the allocation's shared directory.
			mounts = append(mounts, bind("../alloc/"+sockSubdir, port.LLMSocketDir, true))
		}
	}
	if r.cfg.bridgePath != "" {
		mounts = append(mounts, bind(r.cfg.bridgePath, bridgeTarget, true))
	}
	if r.cfg.initPath != "" {
		mounts = append(mounts, bind(r.cfg.initPath, initTarget, true))
		// Nomad's log collection made these files before the task starts.
		for _, kind := range []string{"stdout", "stderr"} {
			mounts = append(mounts, bind(logFile(kind), flushedTarget(kind), true))
		}
	}
	return mounts
}

// workspaceMount is a copied workspace's mount: a tmpfs of the run's size, so the
// workspace is capped and nothing of it is on the node's disk (the init unpacks the
// input into it and sends it back through the task's bounded log files). A tmpfs
// mount of the docker driver would do but for runc, which gives the tmpfs the mode
// of the image's own directory at that path (often root's 0755: the sandbox's user
// could not write). So it is an anonymous volume of Docker's local driver backed by
// a tmpfs, mode 1777: bind-mounted, its mode is kept; anonymous, Docker removes it
// with the container (the driver removes containers with their volumes); labelled
// with the run's owner and run id, so a node-local sweep finds one left behind.
func workspaceMount(spec port.RunSpec, js jobSpec) map[string]any {
	return map[string]any{
		"type": "volume", "target": port.WorkspacePath, "readonly": false,
		"volume_options": map[string]any{
			"no_copy": true,
			"labels":  []map[string]string{js.meta},
			"driver_config": map[string]any{
				"name": "local",
				"options": []map[string]string{{
					"type": "tmpfs", "device": "tmpfs",
					"o": "size=" + strconv.FormatInt(spec.Limits.TmpfsBytes, 10) + ",mode=1777,nosuid,nodev",
				}},
			},
		},
	}
}

// sidecar is the proxy task: started before the sandbox and stopped after it
// (Nomad's prestart sidecar), configured by a template that renders the run's
// variable into its private secrets directory.
func (r *Runner) sidecar(spec port.RunSpec, js jobSpec) *api.Task {
	uid, _, _ := strings.Cut(spec.User, ":")
	labels := map[string]string{port.LabelKind: port.KindProxy}
	for k, v := range js.meta {
		labels[k] = v
	}
	tmpl := fmt.Sprintf(`{{ with nomadVar %q }}{{ .config }}{{ end }}`, variablePath(js.id))
	return &api.Task{
		Name:      sidecarTask,
		Driver:    "docker",
		User:      sidecarUser,
		Lifecycle: &api.TaskLifecycle{Hook: api.TaskLifecycleHookPrestart, Sidecar: true},
		Config: map[string]any{
			"image": r.cfg.proxyImage,
			"args": []string{
				"-config", "/" + sidecarConfig,
				"-socket", "/alloc/" + sockSubdir + "/" + port.LLMSocketName,
				"-audit", "/" + sidecarAudit,
				"-attestation", "/" + sidecarAttestation,
				"-sandbox-uid", uid,
			},
			"network_mode":    r.cfg.proxyNetwork,
			"cap_drop":        []string{"ALL"},
			"security_opt":    []string{"no-new-privileges"},
			"readonly_rootfs": true,
			"pids_limit":      64,
			"labels":          []map[string]string{labels},
			"force_pull":      false,
		},
		Meta: js.meta,
		Templates: []*api.Template{{
			EmbeddedTmpl: ptr(tmpl),
			DestPath:     ptr(sidecarConfig),
			ChangeMode:   ptr("noop"),
			Perms:        ptr("0400"),
			Uid:          ptr(sidecarUID),
			Gid:          ptr(sidecarUID),
		}},
		// Nobody reads the proxy's logs (the job is purged when the run ends), and
		// Nomad would keep them in the allocation's logs directory, which the sandbox
		// can read.
		LogConfig:   &api.LogConfig{MaxFiles: ptr(sidecarLogFiles), MaxFileSizeMB: ptr(sidecarLogFileMB), Disabled: ptr(true)},
		Resources:   &api.Resources{CPU: ptr(100), MemoryMB: ptr(64)},
		KillTimeout: ptr(10 * time.Second),
		KillSignal:  "SIGTERM",
	}
}

// Log rotation of the sidecar and the unpacker (their logs are off).
const (
	sidecarLogFiles  = 2
	sidecarLogFileMB = 1
	// initSlack is room for the init's own messages after the capped output.
	initSlack = 64 << 10
)

// agentLogs sizes Nomad's log files of the sandbox task, per stream: how many, and
// MiB each. With the init, the first file holds the whole capped stream in frames
// (so nothing rotates, and logFile is all of it); without it, each file holds the
// output cap, so the capped prefix survives unless a stream is ten times the cap.
// Docker's own log of the task (both streams in one) is two files of that size.
func (r *Runner) agentLogs(spec port.RunSpec, js jobSpec) (files, mb int) {
	if r.cfg.initPath != "" {
		// Twice the frames: Docker's log holds both streams in one file. A copied
		// workspace comes back on stderr after the output.
		var export int64
		if js.copyWorkspace {
			export = exportFramedSize(exportMax(spec))
		}
		return 2, mib(2*(framedSize(int64(spec.OutputLimit)+1)+initSlack) + export)
	}
	return 10, max(1, mib(int64(spec.OutputLimit)))
}

// killTimeout is how long Nomad waits after the agent task's kill signal before it
// sends SIGKILL.
const killTimeout = 5 * time.Second

// exportKillTimeout replaces killTimeout when the workspace is copied: room for the
// init to send it back (the tmpfs's size through Nomad's log pipeline).
const exportKillTimeout = 30 * time.Second

// killSignal is the agent task's kill signal: SIGTERM for the init (which kills the
// sandbox's processes at once and keeps its output), else SIGKILL.
func (r *Runner) killSignal() string {
	if r.cfg.initPath != "" {
		return "SIGTERM"
	}
	return "SIGKILL"
}

// mib rounds bytes up to whole MiB (Nomad's memory unit).
func mib(b int64) int { return int((b + 1<<20 - 1) >> 20) }

// meta is the job's meta: the port's reserved labels (owner, run, creation time).
func meta(owner, runID string, created time.Time) map[string]string {
	return map[string]string{
		port.LabelOwner:     owner,
		port.LabelRunID:     runID,
		port.LabelCreatedAt: created.UTC().Format(time.RFC3339Nano),
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
