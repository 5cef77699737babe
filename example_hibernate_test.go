package sandbox_test

import (
	"context"
	"fmt"
	"time"

	"github.com/agentsandbox/sandbox"
	"github.com/agentsandbox/sandbox/openclaw"
	"github.com/agentsandbox/sandbox/port"
)

// A session paused while its user is away for a minute (no CPU, memory kept), and
// hibernated when they are away for longer: the sandbox removed, its workspace saved,
// the conversation resumed later in a fresh, pre-booted sandbox from the saved state.
func ExampleSession_Hibernate() {
	var (
		sb    *sandbox.Sandbox // as in the Sandbox.Run example, with a pool of pre-booted OpenClaw slots
		sess  *sandbox.Session // from sb.Start, its workspace holding an OpenClaw conversation
		one   openclaw.OneShot // the conversation's one-shot layout (one SessionID for every turn)
		cfg   *openclaw.Config
		req   sandbox.Request // the next turn's run: its own RunID, an empty WorkspaceDir
		ctx   = context.Background()
		store *sandbox.HibernationStore
	)
	if err := sess.Pause(ctx, port.PauseOptions{StopClock: true}); err != nil { // the lifetime is held too
		panic(err)
	}
	time.Sleep(time.Minute)
	if err := sess.Resume(ctx); err != nil {
		panic(err)
	}

	store, _ = sandbox.NewHibernationStore("/srv/agentsandbox/hibernated")
	h, _, err := sess.Hibernate(ctx, sandbox.HibernateOptions{Store: store, Exclude: openclaw.HibernateExclude})
	if err != nil {
		panic(err)
	}
	// Later, on this host or another that mounts the store:
	h, _ = store.Open(h.ID)
	res, err := sb.RunFrom(ctx, h, req, sandbox.WithPrepare(func(ws string) error {
		return one.PrepareNext(ws, cfg, openclaw.Files{}, "And what did we decide?")
	}))
	if err != nil {
		panic(err)
	}
	for _, s := range res.Segments { // what came from which sandbox
		fmt.Println(s.RunID, len(s.Audit), "calls")
	}
}
