// Package openclaw prepares and reads OpenClaw agent runs: it generates the
// openclaw.json a run uses, writes the workspace files OpenClaw reads, builds the
// argv and environment of a one-shot `openclaw agent --local --json` run, and
// parses that command's JSON envelope.
//
// # Configuration
//
// NewConfig builds an openclaw.json that always holds the sandbox invariants:
// OpenClaw's own sandbox off, cron off, elevated tools off, heartbeats off
// (agents.defaults.heartbeat.every "0m"), a single model provider in "replace"
// mode pointing at the per-run LLM proxy, a tool deny list, no Control UI, and
// nothing that reaches the network at start-up (model catalog refresh and update
// checks off, mDNS off). Agents are emitted under keyed agents.entries (the
// agents.list roster is legacy). Extra settings can be added with WithSetting; a
// setting that would break an invariant or touch a builder-owned value is refused
// with a *SettingError that names it (errors.Is(err, port.ErrInvalidSpec)).
// OpenClaw validates its config strictly, so the output is checked against the
// real `openclaw config validate --json` in this package's tests.
//
// # One-shot runs
//
// A OneShot describes one `openclaw agent --local` invocation in a sandbox. The
// prompt travels in a workspace file passed with --message-file, so it is never
// spliced into a shell string and argument boundaries cannot be lost. Prepare
// writes the config, workspace files and prompt into the host workspace; Apply
// puts the argv and environment into a port.RunSpec. ParseResult turns the
// run's exit code, stdout and stderr into a *Result or a typed error.
//
// The package was written against OpenClaw 2026.9.6 (scripts/install-openclaw.sh
// installs that version for the tests).
package openclaw
