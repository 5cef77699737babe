// Package all registers every runtime adapter's target scheme (docker://,
// containerd://, nomad://, kubernetes://) with port.RegisterRuntime, for programs
// that choose their runtime by a target string at run time:
//
//	import _ "github.com/agentsandbox/sandbox/adapters/all"
//
// A program that uses one runtime imports that adapter instead
// (_ "github.com/agentsandbox/sandbox/adapters/docker") and links none of the
// others' clients: containerd's, Nomad's and client-go are large.
package all

import (
	// Each registers its scheme in its init (driver.go).
	_ "github.com/agentsandbox/sandbox/adapters/containerd"
	_ "github.com/agentsandbox/sandbox/adapters/docker"
	_ "github.com/agentsandbox/sandbox/adapters/kubernetes"
	_ "github.com/agentsandbox/sandbox/adapters/nomad"
)
