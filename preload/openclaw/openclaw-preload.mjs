// The OpenClaw preloader of agentsandbox: the preloaded side of the bridge's preload
// protocol (version 1, api/bridgeapi/preload.go) for `openclaw agent --local --json`
// one-shot runs, pinned to OpenClaw 2026.9.6 (dist/ file names are content-hashed).
//
//   node openclaw-preload.mjs OPENCLAW_PACKAGE_DIR
//
// Before the claim (nothing of a run exists: no config, state, workspace or LLM socket)
// it imports dist/entry.js (importing it runs nothing: its main block runs only as the
// process's main module), the CLI's main module graph dist/cli/run-main.js (what the
// entry imports first at a run; importing it runs nothing either), and the helpers the
// entry's main block uses. (An earlier attempt to import run-main ahead saw one
// sandboxed one-shot fail with ENOENT on the agent's state database; with the re-pins
// below and the run's own environment it passes, in the sandbox and on the host: the
// pinned-version test and TestOpenClawOneShotPreloadedDocker guard it.) It runs no
// turn: a warm-up would need a config, and OpenClaw caches the first config it loads
// for the process's life (config-guard).
//
// At the claim (argv `openclaw ARGS` or `node .../openclaw.mjs ARGS`) it does what the
// entry's main block does for a one-shot, against the run's environment: replace
// process.env, chdir, set process.argv, normalizeEnv(), re-pin the state and config
// paths captured at import (pinRuntimePaths, pinConfigDir, as OpenClaw's gateway does
// when it re-boots), and run runMainOrRootHelp(argv) inside withCliProcessScope. The
// process ends as the CLI ends it (defaultRuntime.exit). What it skips: the launcher's
// runtime checks and self re-launch (OPENCLAW_NO_RESPAWN), --profile/--container argv
// (refused). The launcher's compile cache is used only when one was mounted (a warm,
// read-only openclaw.CompileCache at os.tmpdir()/node-compile-cache), in the
// directory the launcher would use: then the imports before and after the claim read
// it; without one the preloader writes none (a fresh /tmp's cache would only cost
// the writing at the run's exit).
//
// Any mismatch with the pinned version (package version, a moved export) fails the
// preload before it says ready: the pool discards the slot and runs go cold, loudly
// counted, never silently slower.
import fs from 'node:fs';
import module from 'node:module';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const PINNED_VERSION = '2026.9.6';
// The split point in dist/, for PINNED_VERSION: file, export, the function's name.
const SPLIT = {
  withCliProcessScope: ['runtime-cleanup-scope-C0g6_AIJ.mjs', 'o'],
  normalizeEnv: ['env-C4a8LL2I.mjs', 'i'],
  pinRuntimePaths: ['paths-bFNjVB0r.mjs', 'pinRuntimePaths'],
  pinConfigDir: ['utils-CgtqH0G3.mjs', 'pinConfigDir'],
};

const fail = (msg) => { process.stderr.write(`openclaw-preload: ${msg}\n`); process.exit(125); };
const fd = Number(process.env.AGENTSANDBOX_PRELOAD_FD);
if (!Number.isInteger(fd) || fd < 3) fail('AGENTSANDBOX_PRELOAD_FD is not set: run me under sandbox-bridge -claim -preload');
delete process.env.AGENTSANDBOX_PRELOAD_FD;

const pkgDir = process.argv[2];
if (!pkgDir) fail('usage: openclaw-preload.mjs OPENCLAW_PACKAGE_DIR');
const version = JSON.parse(fs.readFileSync(path.join(pkgDir, 'package.json'), 'utf8')).version;
if (version !== PINNED_VERSION) fail(`OpenClaw ${version} is not the pinned ${PINNED_VERSION}: the split point must be proven again`);
const dist = path.join(pkgDir, 'dist');
const load = (f) => import(pathToFileURL(path.join(dist, f)).href);

// The launcher's compile cache directory: <tmp>/node-compile-cache/openclaw/<version>/
// <package.json mtime-size>, each segment reduced to [A-Za-z0-9._-].
const cacheBase = path.join(os.tmpdir(), 'node-compile-cache');
if (fs.existsSync(cacheBase) && module.enableCompileCache) {
  const seg = (v) => v.replace(/[^A-Za-z0-9._-]+/g, '_').replace(/^_+|_+$/g, '') || 'unknown';
  const st = fs.statSync(path.join(pkgDir, 'package.json'));
  module.enableCompileCache(path.join(cacheBase, 'openclaw', seg(version), seg(`${Math.trunc(st.mtimeMs)}-${st.size}`)));
}

// No network, config or state before the claim; and none of the CLI's own start-up.
process.env.OPENCLAW_NO_RESPAWN = '1';
const entry = await load('entry.js');
if (typeof entry.runMainOrRootHelp !== 'function') fail('dist/entry.js no longer exports runMainOrRootHelp');
// The CLI's main graph: the entry's run imports this same module instance at claim.
const runMain = await load('cli/run-main.js');
if (typeof runMain.runCli !== 'function') fail('dist/cli/run-main.js no longer exports runCli');
const fns = {};
for (const [name, [file, exp]] of Object.entries(SPLIT)) {
  const mod = await load(file);
  const fn = mod[exp];
  if (typeof fn !== 'function' || fn.name !== name) fail(`dist/${file} export ${exp} is not ${name}: the split point moved`);
  fns[name] = fn;
}

const ctl = new net.Socket({ fd, readable: true, writable: true });
const send = (v) => new Promise((resolve) => ctl.write(JSON.stringify(v) + '\n', resolve));
await send({ ready: true, protocol: 1 });

let buf = '';
const claim = await new Promise((resolve, reject) => {
  ctl.setEncoding('utf8');
  ctl.on('data', (d) => {
    buf += d;
    const nl = buf.indexOf('\n');
    if (nl >= 0) { ctl.removeAllListeners('data'); resolve(JSON.parse(buf.slice(0, nl))); }
  });
  ctl.on('end', () => reject(new Error('the bridge closed the control channel before a claim')));
  ctl.on('error', reject);
});
const refuse = async (code, entryName, message) => {
  await send({ error: { code, entry: entryName, message } });
  ctl.destroy();
  process.exit(code === 'entry_not_found' ? 127 : 126);
};

const argv = Array.isArray(claim.argv) ? claim.argv : [];
let rest;
if (path.basename(argv[0] || '') === 'openclaw') rest = argv.slice(1);
else if (/(^|\/)(openclaw\.mjs|entry\.js)$/.test(argv[1] || '') && /node(js)?$/.test(path.basename(argv[0] || ''))) {
  if (!fs.existsSync(path.resolve(claim.dir || '/', argv[1]))) await refuse('entry_not_found', argv[1], 'no such file in the sandbox');
  rest = argv.slice(2);
} else await refuse('unsupported', argv[0] || '', 'this runtime runs `openclaw ARGS` or `node openclaw.mjs ARGS` only');
if (rest.some((a) => a === '--profile' || a === '--dev' || a === '--container' || a.startsWith('--profile=') || a.startsWith('--container='))) {
  await refuse('unsupported', argv[0], '--profile, --dev and --container need the launcher');
}

for (const k of Object.keys(process.env)) delete process.env[k];
for (const kv of Array.isArray(claim.env) ? claim.env : []) {
  const i = kv.indexOf('=');
  if (i > 0) process.env[kv.slice(0, i)] = kv.slice(i + 1);
}
process.env.OPENCLAW_NO_RESPAWN = '1';
// The entry captured process.env at its import as the CLI's runtime-recovery
// environment (inheritedRuntimeEnv): here that was the pre-boot's. The run's, as a cold
// start would capture it, goes to runCli instead (the entry's loadRunCli seam).
const runEnv = { ...process.env };
process.chdir(claim.dir || '/');
process.argv = [process.execPath, path.join(dist, 'entry.js'), ...rest];
process.title = 'openclaw';
fns.normalizeEnv();
fns.pinRuntimePaths(process.env);
fns.pinConfigDir(process.env);
await send({ started: true });
ctl.destroy();
await fns.withCliProcessScope(() => entry.runMainOrRootHelp(process.argv, {
  loadRunCli: async () => ({ runCli: (argv, opts) => runMain.runCli(argv, { ...opts, runtimeRecoveryEnv: runEnv }) }),
}));
