package kubernetes

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentsandbox/sandbox/api/bridgeapi"
	"github.com/agentsandbox/sandbox/port"
)

// Names inside a run's Pod.
const (
	podPrefix     = "agentsandbox-"
	agentName     = "agent"
	netdownName   = "netdown"
	bridgeTarget  = "/.agentsandbox/bridge"
	initTarget    = "/.agentsandbox/init"
	annotationRun = port.LabelPrefix + "run-id"
	// AnnotationCreatedAt records the run's start (port.LabelCreatedAt).
	annotationCreated = port.LabelCreatedAt
)

// PIDsAnnotation carries the run's process limit to cmd/sandbox-kube-runtime on the
// node (see WithRuntimePIDsLimit).
const PIDsAnnotation = port.LabelPrefix + "pids-limit"

// NetdownAnnotation ("true") asks cmd/sandbox-kube-runtime on the node to empty the
// Pod's network namespace before the agent's container exists (see
// WithRuntimeNetworkRemoval).
const NetdownAnnotation = port.LabelPrefix + "netdown"

// runLabel is the run's value for the port.LabelRunID label: the run ID itself when it
// is a valid label value, else a digest of it (run IDs may be 64 characters and end in
// '.' or '-'; label values may not). The exact ID is in an annotation.
func runLabel(runID string) string {
	if labelValueRe.MatchString(runID) {
		return runID
	}
	sum := sha256.Sum256([]byte(runID))
	return "h-" + hex.EncodeToString(sum[:15])
}

// podName is unique per RunOnce and keeps the run ID readable.
func podName(runID string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	s := strings.ToLower(runID)
	s = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, s)
	if len(s) > 40 {
		s = s[:40]
	}
	return podPrefix + strings.Trim(s, "-") + "-" + hex.EncodeToString(b[:])
}

// podSpec is what buildPod needs besides the RunSpec.
type podSpec struct {
	name    string
	created time.Time
}

func ptr[T any](v T) *T { return &v }

// buildPod turns a validated spec (with defaults) into the run's Pod.
func (r *Runner) buildPod(spec port.RunSpec, ps podSpec) *corev1.Pod {
	uid, gid := parseUser(spec.User)
	labels, annotations := r.podMeta(spec, ps)

	command, envVars := r.agentCommand(spec, ps)

	dropAll := &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}
	seccomp := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	limits, requests := podResources(spec)
	volumes, mounts, workDir := r.podVolumes(spec)

	agent := corev1.Container{
		Name:            agentName,
		Image:           spec.Image,
		ImagePullPolicy: r.cfg.pullPolicy,
		Command:         command,
		Args:            []string{},
		Env:             envVars,
		WorkingDir:      workDir,
		VolumeMounts:    mounts,
		Resources:       corev1.ResourceRequirements{Limits: limits, Requests: requests},
		SecurityContext: &corev1.SecurityContext{
			RunAsUser:                ptr(uid),
			RunAsGroup:               ptr(gid),
			RunAsNonRoot:             ptr(true),
			Privileged:               ptr(false),
			AllowPrivilegeEscalation: ptr(false),
			ReadOnlyRootFilesystem:   ptr(true),
			Capabilities:             dropAll,
			SeccompProfile:           seccomp,
		},
		TerminationMessagePolicy: corev1.TerminationMessageReadFile,
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: ps.name, Namespace: r.cfg.namespace, Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			// The host's time limit ends the run; this only acts when the host is gone.
			ActiveDeadlineSeconds:         ptr(int64((spec.Limits.Timeout + bridgeapi.DeadlineSlack + bridgeapi.DeadlineGrace + time.Second).Seconds() + 1)),
			TerminationGracePeriodSeconds: ptr(int64(1)),
			AutomountServiceAccountToken:  ptr(false),
			EnableServiceLinks:            ptr(false),
			HostNetwork:                   false,
			HostPID:                       false,
			HostIPC:                       false,
			ShareProcessNamespace:         ptr(false),
			Hostname:                      "sandbox",
			// The API requires a nameserver with dnsPolicy None: the Pod's own loopback,
			// where nothing answers; the agent's /etc/resolv.conf is empty anyway.
			DNSPolicy: corev1.DNSNone,
			DNSConfig: &corev1.PodDNSConfig{Nameservers: []string{"127.0.0.1"}},
			SecurityContext: &corev1.PodSecurityContext{
				SeccompProfile: seccomp,
			},
			Containers: []corev1.Container{agent},
			Volumes:    volumes,
		},
	}
	if r.cfg.runtimeClass != "" {
		pod.Spec.RuntimeClassName = ptr(r.cfg.runtimeClass)
	}
	if r.cfg.netdown {
		pod.Spec.InitContainers = []corev1.Container{r.netdownContainer(spec, seccomp)}
	}
	return pod
}

// podMeta is the run's labels (owner, run, kind over the spec's own) and annotations.
func (r *Runner) podMeta(spec port.RunSpec, ps podSpec) (labels, annotations map[string]string) {
	labels = map[string]string{}
	for k, v := range spec.Labels {
		labels[k] = v
	}
	labels[port.LabelOwner] = r.cfg.owner
	labels[port.LabelRunID] = runLabel(spec.RunID)
	labels[port.LabelKind] = port.KindSandbox
	annotations = map[string]string{
		annotationRun:     spec.RunID,
		annotationCreated: ps.created.UTC().Format(time.RFC3339Nano),
		PIDsAnnotation:    strconv.FormatInt(spec.Limits.PIDs, 10),
	}
	if r.cfg.runtimeNetdown {
		annotations[NetdownAnnotation] = "true"
	}
	return labels, annotations
}

// agentCommand is the agent container's command (the init, then the bridge, then the
// argv) and its environment, in a stable order.
func (r *Runner) agentCommand(spec port.RunSpec, ps podSpec) ([]string, []corev1.EnvVar) {
	env := spec.SandboxEnv()
	names := make([]string, 0, len(env))
	for k := range env {
		names = append(names, k)
	}
	sort.Strings(names)
	var envVars []corev1.EnvVar
	for _, k := range names {
		envVars = append(envVars, corev1.EnvVar{Name: k, Value: env[k]})
	}
	llm := spec.LLM != nil
	command := []string{initTarget, "run", "-keep", strings.Join(names, ","),
		"-nofile", strconv.FormatInt(spec.Limits.OpenFiles, 10), "-max", strconv.Itoa(spec.OutputLimit), "--"}
	if r.cfg.bridgePath != "" {
		prefix := bridgeapi.Prefix(bridgeTarget, llm, spec.Limits.Timeout, ps.created)
		// The init is PID 1: the bridge reaps the agent's orphans as a subreaper.
		prefix = append([]string{prefix[0], "-subreaper"}, prefix[1:]...)
		command = append(command, prefix...)
	}
	command = append(command, spec.Argv...)
	return command, envVars
}

// podResources is the agent's memory and CPU limits and requests.
func podResources(spec port.RunSpec) (limits, requests corev1.ResourceList) {
	mem := resource.NewQuantity(spec.Limits.MemoryBytes, resource.BinarySI)
	limits = corev1.ResourceList{corev1.ResourceMemory: *mem}
	requests = corev1.ResourceList{corev1.ResourceMemory: *mem, corev1.ResourceCPU: resource.MustParse("10m")}
	if n := spec.Limits.NanoCPUs; n > 0 {
		q := resource.NewMilliQuantity(max(1, n/1e6), resource.DecimalSI)
		limits[corev1.ResourceCPU] = *q
		requests[corev1.ResourceCPU] = *q
	}
	return limits, requests
}

// podVolumes is the Pod's volumes and the agent's mounts of them, and its working
// directory.
func (r *Runner) podVolumes(spec port.RunSpec) ([]corev1.Volume, []corev1.VolumeMount, string) {
	tmpfs := resource.NewQuantity(spec.Limits.TmpfsBytes, resource.BinarySI)
	volumes := []corev1.Volume{
		{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: tmpfs}}},
		{Name: "run", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: tmpfs}}},
		hostPathVolume("sandbox-init", r.cfg.initPath, corev1.HostPathFile),
	}
	// The runtime would mount the Pod's resolver configuration; the node's empty
	// /dev/null over it leaves the sandbox none (as the Docker runner does).
	volumes = append(volumes, hostPathVolume("no-resolv-conf", os.DevNull, corev1.HostPathCharDev))
	mounts := []corev1.VolumeMount{
		{Name: "no-resolv-conf", MountPath: "/etc/resolv.conf", ReadOnly: true},
		{Name: "tmp", MountPath: "/tmp"},
		{Name: "run", MountPath: "/run"},
		{Name: "sandbox-init", MountPath: initTarget, ReadOnly: true},
	}
	if r.cfg.bridgePath != "" {
		volumes = append(volumes, hostPathVolume("sandbox-bridge", r.cfg.bridgePath, corev1.HostPathFile))
		mounts = append(mounts, corev1.VolumeMount{Name: "sandbox-bridge", MountPath: bridgeTarget, ReadOnly: true})
	}
	workDir := ""
	if spec.WorkspaceDir != "" {
		volumes = append(volumes, hostPathVolume("workspace", spec.WorkspaceDir, corev1.HostPathDirectory))
		mounts = append(mounts, corev1.VolumeMount{Name: "workspace", MountPath: port.WorkspacePath})
		workDir = port.WorkspacePath
	}
	for i, m := range spec.Mounts {
		name := fmt.Sprintf("mount-%d", i)
		volumes = append(volumes, hostPathVolume(name, m.Source, corev1.HostPathDirectory))
		mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: m.Target, ReadOnly: !m.Writable})
	}
	if spec.LLM != nil {
		volumes = append(volumes, hostPathVolume("llm-sock", spec.LLM.HostDir, corev1.HostPathDirectory))
		mounts = append(mounts, corev1.VolumeMount{Name: "llm-sock", MountPath: port.LLMSocketDir, ReadOnly: true})
	}
	return volumes, mounts, workDir
}

// netdownContainer is the init container that removes the Pod's interfaces.
func (r *Runner) netdownContainer(spec port.RunSpec, seccomp *corev1.SeccompProfile) corev1.Container {
	return corev1.Container{
		Name:            netdownName,
		Image:           spec.Image,
		ImagePullPolicy: r.cfg.pullPolicy,
		Command:         []string{initTarget, "netdown"},
		Args:            []string{},
		VolumeMounts:    []corev1.VolumeMount{{Name: "sandbox-init", MountPath: initTarget, ReadOnly: true}},
		Resources: corev1.ResourceRequirements{
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi")},
			Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi"), corev1.ResourceCPU: resource.MustParse("10m")},
		},
		// Root with CAP_NET_ADMIN only, in the Pod's network namespace only, before
		// any of the agent's code exists; it fails the Pod if anything is left.
		SecurityContext: &corev1.SecurityContext{
			RunAsUser:                ptr(int64(0)),
			RunAsGroup:               ptr(int64(0)),
			RunAsNonRoot:             ptr(false),
			Privileged:               ptr(false),
			AllowPrivilegeEscalation: ptr(false),
			ReadOnlyRootFilesystem:   ptr(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_ADMIN"}},
			SeccompProfile:           seccomp,
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
}

func hostPathVolume(name, path string, typ corev1.HostPathType) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: ptr(typ)}}}
}

// parseUser splits a validated "uid[:gid]" (the gid defaults to the uid).
func parseUser(u string) (uid, gid int64) {
	a, b, ok := strings.Cut(u, ":")
	uid, _ = strconv.ParseInt(a, 10, 64)
	gid = uid
	if ok {
		gid, _ = strconv.ParseInt(b, 10, 64)
	}
	return uid, gid
}
