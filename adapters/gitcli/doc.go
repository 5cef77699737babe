// Package gitcli is a port.RepoRelay on the host's git command line: the host clones a
// repository into a run's workspace, the sandboxed agent commits, and the host pushes
// the agent's commits to a branch. The sandbox never holds a credential.
//
// # The workspace is hostile
//
// After a run, everything in the workspace, .git included, was written by the agent.
// Git reads its repository's config and runs what it names (core.fsmonitor, hooks,
// filter drivers, diff.external, core.sshCommand, credential.helper, include.path, ...),
// and follows symlinked .git parts to wherever they point. So the host never runs git
// (or anything that reads git config) in the workspace after the agent has had it:
//
//   - Export runs a small static Go program (cmd/sandbox-git-export, on go-git, which
//     executes nothing a repository names) in a sandbox: no network, the workspace
//     mounted read-only at /src, a fresh output directory at /out. It writes one git
//     bundle: exactly the commits of the expected branch since the base, with authors,
//     merges and binary files intact (a patch series would lose them).
//   - The host reads only that file, through an os.Root, checks its size and scans its
//     pack before git sees it (every object's inflated size is bounded, so a pack bomb
//     is refused without being expanded), then fetches it into a scratch repository of
//     its own whose objects borrow from the host's mirror. Every git the host runs has
//     GIT_CONFIG_NOSYSTEM=1, GIT_CONFIG_GLOBAL=/dev/null, hooks pointed at /dev/null,
//     protocol.allow=never (file, and the remote's http(s) only where needed), no
//     prompts, no replace objects, and an environment built from scratch.
//   - The scratch repository is validated (descent from the base recorded at clone
//     time, the expected branch only, commit count, file and total sizes, path policy,
//     symlink targets, submodules, identities) and checked by git fsck --strict;
//     a violation is a *port.RejectError naming the rule and the path.
//   - Push goes from the scratch repository to a branch under the policy's prefix, with
//     the credential handed to git by an askpass helper through its environment.
//
// # Clone
//
// Clone keeps a bare mirror per remote under the cache directory (fetched on each
// clone), records the base commit from the mirror, and clones with --no-local (objects
// are copied through the pack protocol, never hard-linked: CVE-2024-32020/32021),
// without submodules, hooks or templates, and with the remote URL set to the
// credential-free URL the host gave.
package gitcli
