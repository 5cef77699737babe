package kubernetes

import (
	"path/filepath"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentsandbox/sandbox/port"
)

// Where the daemon's Pod finds its key: the Secret's one key, as a file of its own.
const (
	daemonKeyDir  = "/etc/agentsandbox-proxyd/key"
	daemonKeyFile = "api-key"
	// DefaultKeySecretKey is the key in the Secret that holds the LiteLLM key.
	DefaultKeySecretKey = "api-key"
)

// ProxyDaemon describes the node-local shared proxy daemon (cmd/sandbox-proxyd) as a
// DaemonSet: one daemon per node, serving the per-run socket directories the runner's
// Pods mount read-only. The LiteLLM key lives in a Secret of the daemon's namespace
// that is mounted into the daemon's container alone (-upstream-key-file): the
// kubelet delivers it, so neither the daemon nor the runner needs an API credential
// that can read Secrets, the host application never holds the key (registrations
// carry none), and the agents' Pods (another namespace, no service account token)
// have no path to it.
type ProxyDaemon struct {
	// Namespace and Name of the DaemonSet (and of its Pods' prefix). Namespace must not
	// be the runner's: keep the Secret away from anything the sandboxes' namespace can
	// reach.
	Namespace, Name string
	// Image runs sandbox-proxyd as its entrypoint (adapters/proxyd.Image).
	Image string
	// PullPolicy of Image (default IfNotPresent).
	PullPolicy corev1.PullPolicy
	// Dir is the node directory of the daemon's state (Dir/state), the per-run socket
	// directories (Dir/runs: the runner mounts them as hostPaths) and its admin socket
	// (Dir/admin.sock, for the host application on the node). It is mounted at the
	// same path, so the paths the daemon reports are the node's. Keep it short: unix
	// socket paths have a limit of 107 bytes.
	Dir string
	// KeySecret names the Secret holding the LiteLLM key under KeySecretKey (default
	// DefaultKeySecretKey). Rotating it reaches the daemon when the kubelet refreshes
	// the volume (about a minute); runs registered from then on use the new key.
	KeySecret, KeySecretKey string
	// Owner is the value of the owner label on the DaemonSet and its Pods.
	Owner string
	// Args are more daemon flags (rate limits, -metrics-listen, ...).
	Args []string
}

// AdminSocket is the daemon's admin socket on the node (for adapters/proxyd.NewClient).
func (d ProxyDaemon) AdminSocket() string { return filepath.Join(d.Dir, "admin.sock") }

// DaemonSet returns the daemon's DaemonSet. Its Pod runs on the node's network (the
// daemon reaches LiteLLM; the sandboxes reach the daemon only through their
// sockets) as root, with a read-only root, no privilege escalation, only CAP_CHOWN and
// CAP_FOWNER (it hands each run's socket directory and token to the sandbox user), RuntimeDefault seccomp,
// no service account token, and tolerates every taint so each node has one.
func (d ProxyDaemon) DaemonSet() (*appsv1.DaemonSet, error) {
	switch {
	case d.Namespace == "" || d.Name == "":
		return nil, port.Invalidf("kubernetes: the proxy daemon needs a namespace and a name")
	case d.Image == "":
		return nil, port.Invalidf("kubernetes: the proxy daemon needs an image")
	case !filepath.IsAbs(d.Dir) || filepath.Clean(d.Dir) != d.Dir:
		return nil, port.Invalidf("kubernetes: the proxy daemon's directory %q is not a clean absolute path", d.Dir)
	case len(d.AdminSocket()) > 100:
		return nil, port.Invalidf("kubernetes: the proxy daemon's directory %q is too long for its sockets", d.Dir)
	case d.KeySecret == "":
		return nil, port.Invalidf("kubernetes: the proxy daemon needs the Secret holding the LiteLLM key")
	}
	if d.KeySecretKey == "" {
		d.KeySecretKey = DefaultKeySecretKey
	}
	if d.PullPolicy == "" {
		d.PullPolicy = corev1.PullIfNotPresent
	}
	sel := map[string]string{port.LabelPrefix + "component": d.Name}
	lbl := map[string]string{port.LabelPrefix + "component": d.Name}
	if d.Owner != "" {
		if !labelValueRe.MatchString(d.Owner) {
			return nil, port.Invalidf("kubernetes: owner %q is not a label value", d.Owner)
		}
		lbl[port.LabelOwner] = d.Owner
	}
	dirType, keyMode := corev1.HostPathDirectoryOrCreate, int32(0o400)
	args := append([]string{
		"-state-dir", filepath.Join(d.Dir, "state"), "-socket-dir", filepath.Join(d.Dir, "runs"),
		"-admin-socket", d.AdminSocket(), "-upstream-key-file", filepath.Join(daemonKeyDir, daemonKeyFile),
	}, d.Args...)
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: d.Name, Namespace: d.Namespace, Labels: lbl},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: lbl},
				Spec: corev1.PodSpec{
					HostNetwork:                  true,
					DNSPolicy:                    corev1.DNSClusterFirstWithHostNet,
					AutomountServiceAccountToken: ptr(false),
					EnableServiceLinks:           ptr(false),
					Tolerations:                  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{
						Name: "proxyd", Image: d.Image, ImagePullPolicy: d.PullPolicy, Args: args,
						SecurityContext: &corev1.SecurityContext{
							RunAsUser: ptr(int64(0)), AllowPrivilegeEscalation: ptr(false), ReadOnlyRootFilesystem: ptr(true),
							Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"CHOWN", "FOWNER"}},
							SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
						},
						VolumeMounts: []corev1.VolumeMount{
							{Name: "dir", MountPath: d.Dir},
							{Name: "key", MountPath: daemonKeyDir, ReadOnly: true},
							{Name: "tmp", MountPath: "/tmp"},
						},
					}},
					Volumes: []corev1.Volume{
						{Name: "dir", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: d.Dir, Type: &dirType}}},
						{Name: "key", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
							SecretName: d.KeySecret, DefaultMode: &keyMode,
							Items: []corev1.KeyToPath{{Key: d.KeySecretKey, Path: daemonKeyFile}},
						}}},
						{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: ptr(resource.MustParse("16Mi"))}}},
					},
				},
			},
		},
	}, nil
}

// KeySecret returns the Secret holding the LiteLLM key for a ProxyDaemon, labelled
// with its owner. Create it in the daemon's namespace (not the runner's).
func KeySecret(namespace, name, owner, key string) (*corev1.Secret, error) {
	if key == "" {
		return nil, port.Invalidf("kubernetes: empty LiteLLM key")
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{DefaultKeySecretKey: []byte(key)},
	}
	if owner != "" {
		if !labelValueRe.MatchString(owner) {
			return nil, port.Invalidf("kubernetes: owner %q is not a label value", owner)
		}
		s.Labels = map[string]string{port.LabelOwner: owner}
	}
	return s, nil
}
