package sandbox

import (
	"github.com/agentsandbox/sandbox/port"
)

// No quiet misconfiguration: an option or a request field that could do nothing,
// or two that contradict each other, is refused with port.ErrInvalidSpec naming
// them, before anything starts, rather than accepted and ignored.

// checkOptions refuses options that do nothing given the others. llm says the
// Sandbox will have LLM access, reconciler that it will have a reconciler (Open
// decides both after its options).
func (s *Sandbox) checkOptions(llm, reconciler bool) error {
	switch {
	case s.reconciler != nil && !llm:
		return port.Invalidf("WithReconciler without LLM access (WithLLM): a run without LLM calls has nothing to reconcile")
	case s.reconcileTimeoutSet && !reconciler:
		return port.Invalidf("WithReconcileTimeout without a reconciler (WithReconciler): nothing is reconciled")
	case s.egress != nil && !llm:
		return port.Invalidf("WithEgress without LLM access (WithLLM): egress goes through the run's proxy, and a run without LLM access has none")
	case s.modelEnvSet && !llm:
		return port.Invalidf("WithModelEnv without LLM access (WithLLM): Request.Model, which it carries, needs LLM access")
	case s.prs != nil && s.relay == nil:
		return port.Invalidf("WithPullRequester without WithRepoRelay: a pull request is opened from the branch the relay pushes")
	}
	if s.egress != nil && s.llm != nil {
		if c, ok := s.llm.Proxy.(port.ProxyCapable); ok && !c.ProxyCapabilities().Egress {
			return port.Invalidf("WithEgress with a proxy manager that has no egress front (%T); use adapters/inprocproxy", s.llm.Proxy)
		}
	}
	return nil
}

// checkRequest refuses request fields that do nothing on this Sandbox or
// contradict each other; session says the request is a SessionRequest's.
func (s *Sandbox) checkRequest(req Request, session bool) error {
	if s.llm == nil {
		// Each of these only means something to the run's LLM proxy.
		var field string
		switch {
		case req.Model != "":
			field = "Model"
		case req.Attribution != (port.Attribution{}):
			field = "Attribution"
		case req.Budget != (port.Budget{}):
			field = "Budget"
		case req.FailOnBudget:
			field = "FailOnBudget"
		case req.FailOnUpstream:
			field = "FailOnUpstream"
		case req.RequireAttestation:
			field = "RequireAttestation"
		case req.Reconcile:
			field = "Reconcile"
		case req.ReconcileAsync:
			field = "ReconcileAsync"
		case req.Egress != nil:
			field = "Egress"
		case req.OwnBridge:
			field = "OwnBridge"
		}
		if field != "" {
			return port.Invalidf("Request.%s asks for LLM access, but this Sandbox has none (%s): it would run the agent without it", field, s.noLLMFix())
		}
	}
	switch {
	case req.Reconcile && req.ReconcileAsync:
		return port.Invalidf("Request.Reconcile and ReconcileAsync together: say one (wait for the usage, or get it from Result.Reconciling)")
	case req.FailOnBudget && req.Budget == (port.Budget{}):
		return port.Invalidf("Request.FailOnBudget without a Budget: no call can be refused for a budget")
	case (req.Reconcile || req.ReconcileAsync) && s.reconciler == nil:
		return port.Invalidf("Request.Reconcile or ReconcileAsync without a reconciler (WithReconciler)")
	}
	if session {
		switch {
		case req.Stdout != nil || req.Stderr != nil:
			return port.Invalidf("a session keeps its logs (Session.Logs); Stdout and Stderr must be nil")
		case req.OutputLimit != 0:
			return port.Invalidf("SessionRequest.OutputLimit: a session's logs are bounded by LogLimit")
		case req.Preload != nil:
			return port.Invalidf("SessionRequest.Preload: sessions start cold; a pre-booted sandbox serves Run through WithPool")
		}
	}
	return nil
}

// noLLMFix says how this Sandbox would get LLM access.
func (s *Sandbox) noLLMFix() string {
	if s.open != nil {
		return "opened WithoutLLM"
	}
	return "New without WithLLM"
}

// runIDHint adds what to do about an empty run ID.
func (s *Sandbox) runIDHint(id string) string {
	if id == "" && s.open == nil {
		return " (a Sandbox made by New needs the host's run ID, e.g. sandbox.NewRunID(); one made by Open generates it)"
	}
	return ""
}
