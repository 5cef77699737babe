// Package nomad is a port.SandboxRunner (and port.ProxyManager and port.Sweeper) on a
// HashiCorp Nomad cluster: a host application moves from one machine to a cluster by
// choosing this runner instead of adapters/docker, with the same lockdown, the same LLM
// proxy guarantees and the same conformance suites (sandboxtest).
//
// It talks to Nomad only through its HTTP API, with the official Go client
// (github.com/hashicorp/nomad/api), and is tested against Nomad 1.6.3 (the last MPL-2.0
// release; scripts/install-nomad.sh builds it).
//
// # One run, one job
//
// RunOnce submits one batch job per run (ID agentsandbox-<run>-<random>; meta: the
// port's owner, run and creation-time labels), waits for its evaluation and allocation
// with blocking queries, and on every path (success, error, time limit, cancellation,
// panic) purges the job, collects the allocation on its node (containers and
// directories go at once, not at the client's next garbage collection) and deletes the
// run's proxy variable. The job never restarts or reschedules: a sandbox runs once.
// A time limit or a cancelled context sends SIGKILL to the sandbox task and the run
// ends as port.CodeTimeout; an OOM kill (the bridge's count, or the docker driver's
// flag) as port.CodeOOMKilled; an image that cannot be pulled, a command that cannot be
// started or a job no node can take as port.CodeContainerFailed.
//
// # The lockdown, in the docker driver's task config
//
// network_mode "none" (plus an empty /etc/resolv.conf), cap_drop ["ALL"],
// security_opt ["no-new-privileges"], readonly_rootfs, tmpfs /tmp and /run (sized),
// pids_limit, memory (MiB; swap equal, so none extra), ulimit nofile, the non-root
// user of the spec, hostname "sandbox", private IPC, the bridge and the init mounted
// read-only. What the driver cannot express is refused, never weakened:
// port.ErrUnsupported for an internal network and for CPU limits that are not whole
// cores (reserved as Nomad cores). Known differences from the Docker runner:
//
//   - Nomad's docker driver always mounts the allocation's shared directory and the
//     task's own local/ and secrets/ directories, read-write, on the node's disk with
//     no bound. The runner binds all three under a path Docker masks
//     (NOMAD_ALLOC_DIR=/sys/firmware, NOMAD_TASK_DIR and NOMAD_SECRETS_DIR beneath),
//     so the sandbox has no /alloc, /local or /secrets; its socket directory and a
//     copied workspace reach it through binds of their own. The key, the proxy's
//     configuration and its audit live in the sidecar's own task directories, which
//     the sandbox cannot see either.
//   - tmpfs sizes are honoured; the noexec,nosuid,nodev options are Docker's defaults
//     for tmpfs mounts.
//
// # Client nodes
//
// Each client needs the docker driver with volumes enabled (the bridge, the init and,
// when WithHostPaths is on, workspaces and mounts are bind-mounted from the node):
//
//	plugin "docker" {
//	  config {
//	    volumes { enabled = true }
//	    gc {
//	      image = false                      # the images are loaded locally
//	      dangling_containers {
//	        enabled = false                  # only when clients share one engine
//	      }
//	    }
//	    allow_runtimes = ["runc", "runsc"]   # for WithRuntime
//	  }
//	}
//
// allow_caps needs no change: the sandbox drops every capability. The bridge
// (bridge.Build) and the init (BuildInit) must be at the same path on every node, and
// the agent's and the proxy's images (ProxyImage) in every node's Docker engine.
//
// # The workspace
//
// By default RunSpec.WorkspaceDir and Mounts are bind-mounted from the node
// (WithHostPaths): right on one machine or with shared storage. WithWorkspaceCopy
// copies the workspace instead: packed on the host through os.Root, unpacked by the
// init into /workspace, a tmpfs volume of the run's disk size (Limits.TmpfsBytes: the
// workspace is capped and nothing of it is on the node's disk), and sent back by the
// init as a tar archive on the task's stderr once the agent has ended; the runner
// copies it into the host directory, regular files and directories only, written
// through os.Root.
//
// # The LLM proxy: a sidecar beside the sandbox
//
// The Runner is also a port.ProxyManager. Start validates the proxy spec (as
// adapters/inprocproxy does) and returns a Proxy whose Socket is a token; a RunOnce whose
// spec carries it adds a prestart sidecar task to the job: cmd/sandbox-llmproxy, the
// same proxy engine as the in-process proxy, serving the run on a unix socket in the
// allocation's shared directory, which the sandbox task mounts read-only at
// /llm-sock, where the bridge forwards 127.0.0.1:8080. The sandbox task always has no
// network; the sidecar has WithProxyNetwork's (default host, to reach LiteLLM).
//
// The key never reaches the sandbox task: the runner writes the proxy's configuration
// as a Nomad variable under the job's path (encrypted at rest by the servers), a
// template renders it into the sidecar's private secrets directory (mode 0400, owned
// by the proxy's user), the sidecar reads and deletes it, and the runner deletes the
// variable when the run ends. The sidecar writes its audit as JSON lines into its own
// task directory (rewritten every second and at the end); the runner reads it through
// Nomad's file system API when the run ends and adds it to the Proxy, whose Stop
// returns every record. Budgets (port.Budget.MaxCalls across the proxy's runs) and
// attestation (port.Attester) work as with the in-process proxy. A shared proxy
// daemon can replace the sidecar's program as long as it serves the run on the socket
// and writes the audit where the runner reads it.
//
// # The init
//
// WithInit mounts cmd/sandbox-nomad-init as the sandbox's first process, before the
// bridge: it removes the NOMAD_* variables Nomad adds to every task (the agent's
// environment is exactly the spec's), waits until the proxy's socket accepts
// connections (Nomad starts the sandbox once the sidecar runs, not once it listens),
// and passes stdout and stderr on to the task's own streams, capped, as frames (lines
// of base64, so that Docker neither holds back a partial line nor changes a byte that
// is not UTF-8), and exits only once Nomad has stored them; the runner reads them
// through Nomad's log API, live and when the run ends. Without it, output comes from
// the log API as the agent wrote it, which can miss the last output of a container
// (the driver stops collecting when the container exits), and the agent sees Nomad's
// variables.
//
// # Sweeping
//
// Sweep lists the jobs whose ID has the runner's prefix and whose meta names its owner,
// keeps those younger than SweepOptions.OlderThan, and purges the rest (with their
// allocations and variables); DryRun only reports. It also deletes proxy variables of
// its owner whose job is gone.
package nomad
