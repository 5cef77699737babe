// Package kubernetes is a port.SandboxRunner (and port.Sweeper, port.SessionRunner) on a Kubernetes
// cluster, through k8s.io/client-go: a host application moves from one machine to a
// cluster by choosing this runner, with the same lockdown and the same conformance
// suites (sandboxtest). It is tested against Kubernetes 1.36 built from source
// (scripts/install-kubernetes.sh, internal/testsupport/kubetest) with client-go v0.37 (the version
// the module's containerd client already requires; one minor version of skew is
// within client-go's support).
//
// # One run, one Pod
//
// RunOnce creates one Pod per run (name agentsandbox-<run>-<random>; labels: the
// port's owner, run and kind; annotations: the exact run ID and its start), watches it,
// follows the agent container's log while it runs, and on every path (success, error,
// time limit, cancellation, panic) deletes the Pod: at once when nothing of it runs any
// more (the kubelet then removes the vanished Pod's sandbox, volumes and cgroups by
// itself), else with a grace of one second, waiting until the kubelet has confirmed
// that its containers are gone. The Pod never restarts (restartPolicy Never). A time limit or a cancelled
// context deletes the Pod and the run ends as port.CodeTimeout with the output so far;
// activeDeadlineSeconds (the limit plus the bridge's slack) ends it when the host is
// gone. An image that cannot be pulled, a RuntimeClass that does not exist, a command
// that cannot be started or a failed network init give port.CodeContainerFailed; an
// OOM kill (the bridge's notice, or the kubelet's OOMKilled) port.CodeOOMKilled; a Pod
// deleted by someone else, evicted or lost with its node a *PodLostError with the
// output collected until then.
//
// # The lockdown, in the Pod spec
//
// The agent container: runAsUser/runAsGroup of the spec, runAsNonRoot,
// allowPrivilegeEscalation false, privileged false, readOnlyRootFilesystem, every
// capability dropped, the RuntimeDefault seccomp profile; /tmp and /run are sized
// memory-backed emptyDirs (counted in the memory limit); memory limit = request; a CPU
// limit when the spec has one. The Pod: automountServiceAccountToken false (no API
// credentials inside), enableServiceLinks false, no host network, PID or IPC
// namespace, hostname "sandbox", an empty /etc/resolv.conf (the node's /dev/null, as
// on Docker),
// the RuntimeClass of WithRuntimeClass. What a Pod cannot express is handled so:
//
//   - Process limit: Kubernetes has no per-Pod field. The runner puts the run's limit
//     in the Pod annotation PIDsAnnotation; cmd/sandbox-kube-runtime, installed on the
//     nodes as the RuntimeClass's runtime binary, writes it into each container's OCI
//     spec (WithRuntimePIDsLimit says the nodes have it; the attestation shows the
//     limit from inside). Without it only the kubelet's podPidsLimit bounds a Pod:
//     WithNodePIDsLimit declares that, and a spec asking for fewer processes than the
//     nodes allow is refused with port.ErrUnsupported.
//   - Open files: the agent's first process (cmd/sandbox-kube-init) lowers
//     RLIMIT_NOFILE, soft and hard, before anything of the agent runs.
//   - Environment: the kubelet adds KUBERNETES_SERVICE_* to every container even
//     without service links; sandbox-kube-init passes on the spec's variables only.
//   - stdout and stderr: the log API merges them (splitting them is alpha in 1.36), so
//     sandbox-kube-init frames both streams on the container's stdout and the runner
//     decodes them (see the command's doc); the kubelet caps each container's log
//     file (containerLogMaxSize), the runner each stream at the spec's OutputLimit.
//   - The kubelet bind-mounts /etc/hosts, /etc/hostname and a writable
//     /dev/termination-log into every container.
//
// # No network, on any CNI
//
// Every Pod gets a network namespace and, from the cluster's CNI plugin, an interface
// in it. The runner adds an init container, the only step of the Pod with a
// capability: it runs sandbox-kube-init netdown as root with CAP_NET_ADMIN alone (no
// privilege escalation, read-only root, RuntimeDefault seccomp), deletes every
// interface but lo (the veth's node end goes with it) and fails the Pod unless only lo
// and no route through anything else remain. The agent's container starts after it,
// in the same network namespace, with no capability to add an interface back. This
// works whatever the CNI, needs no NetworkPolicy support, and is proved per run by the
// bridge's attestation (port.Attestation: interfaces, routes) and by the conformance
// suite. The cost: the namespace must admit NET_ADMIN for that init container (Pod
// Security "privileged" level; "baseline" forbids NET_ADMIN), so keep the runner's
// namespace for sandboxes only. A NetworkPolicy denying all ingress and egress is
// worth adding as defence in depth where the CNI enforces one (the test cluster's
// bridge plugin does not). With gVisor (RuntimeClass runsc with --network=none) the
// sandbox never sees the Pod's interface; WithoutNetworkInit drops the init there.
//
// On nodes whose RuntimeClass runs cmd/sandbox-kube-runtime (as WithRuntimePIDsLimit
// needs), WithRuntimeNetworkRemoval moves that step into the wrapper: as it creates
// the agent's container it empties the Pod's network namespace the same way and
// refuses to create the container otherwise. No container of the Pod then has a
// capability, and a run is faster by the init container's start and the kubelet's
// noticing its end (its relist, once a second).
//
// # LLM access: a node-local proxy daemon
//
// The LLM proxy is the shared proxy daemon (cmd/sandbox-proxyd, adapters/proxyd)
// running on each node (a DaemonSet, or a host process): its per-run socket directory
// (port.LLMSocket.HostDir, with the run token) is mounted read-only at /llm-sock as a
// hostPath, and the bridge forwards 127.0.0.1:8080 to it. The key never enters the
// Pod or its spec: the daemon holds it. ProxyDaemon describes that daemon as a
// DaemonSet whose LiteLLM key is a Secret (KeySecret) in the daemon's own namespace,
// mounted into the daemon's container alone and read by the daemon
// (-upstream-key-file): registrations then carry no key, so the host application
// never has it either, and the agent's Pod (no token, another namespace, no Secret
// volume) has no way to it; a canary test scans a running agent for it.
//
// # Nodes
//
// The bridge (bridge.Build) and the init (BuildInit) must be at the same path on every
// node (they are hostPath mounts), and the agent's image on every node or in a
// registry (WithImagePullPolicy). The runner's identity needs Role (create, get, list,
// watch and delete Pods, get their logs, create pods/exec) in its namespace, nothing
// more.
//
// # Sessions
//
// Start runs a session as one long-running Pod, locked down as a run, with the
// session's host directory (WithSessionDir) as a hostPath at the bridge's expose
// directory: exposed ports are unix sockets there, dialled on the host, so sessions
// need host paths (a runner on the node, or one node). The handle follows the Pod's
// log into its rings (the init forwards everything; the node's log file never blocks
// the agent). Exec is the API server's pods/exec subresource (SPDY, authorized by
// create; WebSocket as a fallback needs get as well), running the init and the bridge
// in the agent container, so an exec has the agent's user, security context,
// environment filter, open-files limit and a time limit enforced inside. Stop deletes
// the Pod with the grace as its termination period (SIGTERM through the init, SIGKILL
// after) and reports the agent's exit. Attach finds the Pod by its labels (owner,
// kind session) and name, and replays its log from the start: output written while no
// host was attached is kept by the node (up to the kubelet's log rotation), not
// counted as dropped. The session's record (directory, ports, deadline, user,
// workspace) is in the Pod's annotations; the heartbeat is a file in the session
// directory, which Sweep reads.
//
// # Sweeping
//
// Sweep lists the Pods of its namespace whose owner label is the runner's, keeps those
// younger than SweepOptions.OlderThan (by their creation; a session's by its last
// heartbeat), and deletes the rest (a session's directory with it); DryRun only
// reports.
package kubernetes
