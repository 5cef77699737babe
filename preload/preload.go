// Package preload ships the preloaded side of the bridge's preload protocol (see
// api/bridgeapi: PreloadReady, PreloadClaim, PreloadAnswer) for agent runtimes: a
// warm pool's template names a preload command (port.PoolTemplate.Preload), the
// slot's bridge starts it before any run exists, and at claim hands it the run's
// argv, environment, working directory and deadline, so the runtime's start-up is
// paid before the run instead of during it.
//
// Node is the generic Node.js preloader (any ESM or CommonJS entry): copy it into
// the agent's image and name `node /path/preload.mjs [--import MODULE]...` as the
// preload command; runs then give `node ENTRY ARGS...` as their argv.
//
// A runtime in another language implements the protocol itself: read the control
// channel's descriptor from AGENTSANDBOX_PRELOAD_FD, load, write {"ready":true},
// read one claim line, replace the environment, change directory, answer
// {"started":true} (or {"error":{"code":"entry_not_found","entry":...}}), close
// the channel and run. Nothing may be written to stdout before the claim.
package preload

import _ "embed"

// Node is the generic Node.js preloader (preload.mjs).
//
//go:embed node/preload.mjs
var Node []byte

// NodeName is the file name Node is meant to be installed under.
const NodeName = "preload.mjs"

// OpenClaw is the OpenClaw preloader (openclaw-preload.mjs) for `openclaw agent
// --local --json` one-shot runs: `node openclaw-preload.mjs [--warm-up]
// OPENCLAW_PACKAGE_DIR` imports the CLI's entry, its main module graph and its helpers
// before the claim (and reads a mounted warm compile cache, openclaw.CompileCache) and
// runs the CLI in-process at it. With --warm-up it also runs one throwaway turn before
// the claim, against a stub it serves on loopback with a throwaway config and state
// that it removes, resets OpenClaw's config caches after it, and starts the worker
// threads a run waits on as standbys and a spare of the SQLite snapshot child every
// fresh one-shot waits on: runs about 4x faster than a cold one-shot, at about 640 MiB
// per idle slot instead of about 50 (see the file's comment and
// docs/warm-pools-and-runtimes.md). With --warm-up-follow-up the warm-up runs a second
// turn on the first turn's state, so a run that finds OpenClaw state in its workspace
// (a conversation's next turn, a hibernated session resumed) finds the path OpenClaw
// takes then (its doctor's state-migration preflight) loaded too. After either:
// --no-standby-workers starts neither standbys nor the spare (about 290 MiB less per
// idle slot, seconds more per run); --standby-archive-workers gives the session
// archive's two workers standbys too (about 100 MiB more, no faster);
// --no-spare-sqlite-child starts no spare (about 60 MiB less, about 0.2 s more). The
// warm-up's config turns plugins off, as openclaw.NewConfig does unless
// openclaw.WithPlugins allows some (a run that does loads them after its claim);
// --warm-up-default-plugins leaves them to OpenClaw's defaults, the benchmarks'
// comparison. It is
// pinned to OpenClawVersion and refuses to say ready for any other, or when a warm-up
// turn does not answer as expected.
//
//go:embed openclaw/openclaw-preload.mjs
var OpenClaw []byte

// OpenClawName is the file name OpenClaw is meant to be installed under.
const OpenClawName = "openclaw-preload.mjs"

// OpenClawVersion is the OpenClaw release the OpenClaw preloader was proven against.
const OpenClawVersion = "2026.9.6"
