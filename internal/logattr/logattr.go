// Package logattr names the log attribute keys every package of the module uses, so that
// one query (run_id=..., component=...) finds a run's records whichever part wrote them.
package logattr

// Attribute keys. Values: Component is the writing part ("docker.runner", "inproc");
// RunID and Attempt as in port.RunSpec; Container a runtime's container id (Docker's
// short form); Err an error.
const (
	Component = "component"
	RunID     = "run_id"
	Attempt   = "attempt"
	Container = "container"
	Owner     = "owner"
	Path      = "path"
	Status    = "status"
	Err       = "err"
)
