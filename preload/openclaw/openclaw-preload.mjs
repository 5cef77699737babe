// The OpenClaw preloader of agentsandbox: the preloaded side of the bridge's preload
// protocol (version 1, api/bridgeapi/preload.go) for `openclaw agent --local --json`
// one-shot runs, pinned to OpenClaw 2026.9.6 (dist/ file names are content-hashed).
//
//   node openclaw-preload.mjs [--warm-up | --warm-up-follow-up [--no-standby-workers | --standby-archive-workers]
//     [--warm-up-default-plugins]] [--no-spare-sqlite-child] OPENCLAW_PACKAGE_DIR
//
// Before the claim (nothing of a run exists: no config, state, workspace or LLM socket)
// it imports dist/entry.js (importing it runs nothing: its main block runs only as the
// process's main module), the CLI's main module graph dist/cli/run-main.js (what the
// entry imports first at a run; importing it runs nothing either), and the helpers the
// entry's main block uses. (An earlier attempt to import run-main ahead saw one
// sandboxed one-shot fail with ENOENT on the agent's state database; with the re-pins
// below and the run's own environment it passes, in the sandbox and on the host: the
// pinned-version test and TestOpenClawOneShotPreloadedDocker guard it.)
//
// With --warm-up it then runs one whole throwaway one-shot turn, so what OpenClaw does
// lazily on a run's first turn (state-database code and its workers, the plugin
// registry, the agent command's imports, session and model preparation, the tools'
// modules) is paid before the claim too. The turn runs against a tiny stub of an
// OpenAI-compatible endpoint this file serves on 127.0.0.1 (an ephemeral port: the
// sandbox has no network before the claim, and the run's own endpoint does not exist
// yet), with a throwaway config, state, home and workspace under a fresh directory in
// os.tmpdir(); its model, provider endpoint, session id, prompt and answer are its own,
// all distinct from any run's. Then, before it says ready: the turn's output (captured,
// never written to stdout) must be the stub's answer, or the preload fails; the CLI's
// exit (defaultRuntime.exit, intercepted for the warm-up only) is swallowed; its
// resources are closed (harnesses, agent and state databases and their workers);
// OpenClaw's process-lifetime caches of the loaded config are reset (config-guard's
// snapshot and doctor flag, the runtime config snapshot), so the run loads its own
// config as a fresh process would; the session disk-budget reader's worker pool is
// drained and its worker retired (OpenClaw retires it after 60 s idle anyway, and a run
// claimed later then started a fresh one after its claim); the directory is removed and
// the environment and working directory restored.
// Last, it starts the worker threads a run will ask for as standbys (see
// startStandbyWorkers; not with --no-standby-workers, which trades seconds of a run for
// about 290 MiB of the idle slot). It costs memory (see docs/warm-pools-and-runtimes.md for the
// measured figures and the limit to give the slot): opt-in.
//
// The warm-up loads some 2,900 modules; one that computes a top-level value from the
// environment or a path at import keeps the warm-up's value for the run.
// TestOpenClawWarmUpGraphCaptures finds each and names why it cannot reach a one-shot
// run: the state and config paths are re-pinned at the claim; the exec tool's
// DEFAULT_PATH and the OpenClaw-sandbox paths serve only OpenClaw's own sandbox mode,
// which a one-shot config (openclaw.Config) sets off (TestOpenClawWarmUpPinned); the
// default workspace serves only a config naming none, and openclaw.Config names one.
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
// directory the launcher would use, recorded where the launcher records it: then the
// imports before and after the claim, and OpenClaw's worker threads, read it; without
// one the preloader writes none (a fresh /tmp's cache would only cost the writing at
// the run's exit).
//
// Any mismatch with the pinned version (package version, a moved export, a warm-up turn
// that does not answer as expected) fails the preload before it says ready: the pool
// discards the slot and runs go cold, loudly counted, never silently slower. A warm-up
// that does not end is ended by the slot's one boot deadline (port.Preload.Timeout, which
// the bridge enforces until ready): the preloader keeps no shorter deadline of its own,
// which on a loaded machine discarded slots the host had given the time to warm up.
import fs from 'node:fs';
import module from 'node:module';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import v8 from 'node:v8';
import vm from 'node:vm';

const PINNED_VERSION = '2026.9.6';
// The split point in dist/, for PINNED_VERSION: file, export, the function's name.
const SPLIT = {
  withCliProcessScope: ['runtime-cleanup-scope-C0g6_AIJ.mjs', 'o'],
  normalizeEnv: ['env-C4a8LL2I.mjs', 'i'],
  pinRuntimePaths: ['paths-bFNjVB0r.mjs', 'pinRuntimePaths'],
  pinConfigDir: ['utils-CgtqH0G3.mjs', 'pinConfigDir'],
};
// What the warm-up turn needs besides, for PINNED_VERSION (same columns; the first two
// are objects, checked by shape).
const WARM = {
  defaultRuntime: ['runtime-BC29JSZp.mjs', 'r'],
  testApi: ['config-guard-BU0O9rns.mjs', 'testApi'],
  resetConfigRuntimeState: ['runtime-snapshot-DbgWcCyV.mjs', 'S'],
  closeCliResources: ['one-shot-exit-CRUuwygW.mjs', 'a'],
  closeOpenClawStateDatabaseAsync: ['openclaw-state-db-quM4UOZq.mjs', 'closeOpenClawStateDatabaseAsync'],
};
// The worker threads a one-shot run starts after the claim, started ahead with --warm-up
// (see startStandbyWorkers), for PINNED_VERSION: entry script, how many a run starts,
// the modules its messages make it import later, whether it reads workerData at import
// (then only its imports are loaded ahead, and the entry at the claim), the
// resourceLimits OpenClaw gives it (a standby has them from its start), and whether it
// is started ahead only with --standby-archive-workers. The session archive's two
// maintenance workers are: the run does not wait for them, so their standbys (about 100
// MiB of an idle slot) made no run faster, measured side by side (docs/benchmarks.md).
const STANDBY = {
  'infra/sqlite-store.worker.js': [2, ['state/openclaw-state.worker.js', 'state/openclaw-agent-execution.worker.js',
    'openclaw-state-worker-runtime-w7KnYZvx.mjs', 'infra/heartbeat-outcome-store.worker.js',
    'agents/sessions/session-manager-metadata.worker.js', 'plugin-metadata-snapshot.runtime-DYLfTizO.mjs'], false, 'db', false],
  'config/sessions/session-accessor.sqlite-archive.worker.js': [2, ['session-accessor.sqlite-mutation-worker.runtime-CyUmBXrn.mjs',
    'session-accessor.sqlite-reclamation-UaLqXnUk.mjs', 'plugin-metadata-snapshot.runtime-DYLfTizO.mjs'], true, 'db', true],
  'config/sessions/session-transcript.worker.js': [1, ['openclaw-quarantine-store-DAfgDica.mjs', 'session-accessor.sqlite-active-context-9vZE8MvL.mjs',
    'session-transcript-hydration.worker-C_B_CMWY.mjs', 'openclaw-agent-db-readonly-scope-B4qyxiDQ.mjs'], false, 'db', false],
  'state/openclaw-state-read.worker.js': [1, [], false, 'db', false],
  // The session disk-budget reader: a WorkerTaskPool worker, which OpenClaw retires after
  // 60 s idle (the pool's default idleTimeoutMs). The warm-up's is retired at its end
  // (DISK_BUDGET_WORKERS), so a run claimed a minute or an hour later gets this standby
  // rather than a fresh worker after the claim.
  'config/sessions/disk-budget.worker.js': [1, [], false, 'none', false],
};
// The resourceLimits of each kind of worker, as OpenClaw gives them ('none': it gives none).
const STANDBY_LIMITS = { db: { maxOldGenerationSizeMb: 512 }, none: undefined };
// OpenClaw's SQLite read-only snapshot child, for PINNED_VERSION: a child process
// (execFile of node) with this entry, this first argument, one of these modes and this
// maxBuffer. Every fresh one-shot waits on one after its claim, and most of its start is
// importing the entry's packages (0.24 of 0.27 s on a quiet host): see startSpareSqliteChild.
// startEnv: what the CLI's start-up adds to the environment before it, when unset
// (NODE_NO_WARNINGS counts only at a process's start, so the spare starts with it).
const SQLITE_CHILD = {
  entry: 'infra/sqlite-readonly-location.worker.js', arg: '--openclaw-sqlite-readonly-child', modes: new Set(['sync', 'async']), maxBuffer: 1048576,
  startEnv: { NODE_NO_WARNINGS: '1' },
};
// The environment a process reads when it starts rather than when its code asks (Node's
// own settings, libuv's, locale and time zone, TLS): a spare started before the claim
// serves the run only when these are the same. (Colour settings its packages capture at
// import are left out: the child answers in JSON, and only its error text could differ.)
const startKey = (k) => /^(NODE_|UV_|LC_)/.test(k) || ['TZ', 'LANG', 'LANGUAGE', 'SSL_CERT_FILE', 'SSL_CERT_DIR', 'OPENSSL_CONF'].includes(k);
// A spare child's bootstrap (node -e, the entry's path as its argument): import the entry
// under another URL (its packages load and stay cached; its main block runs only when
// argv[2] names the child mode, which it does not here), then block on stdin for the
// handover line (the child's environment and arguments, exactly as OpenClaw asked),
// take them, and import the entry itself, whose main block then runs as in a fresh child.
const SPARE_BOOT = `'use strict';
const fs = require('node:fs'), { pathToFileURL } = require('node:url');
const entry = process.argv[1];
(async () => {
  await import(pathToFileURL(entry).href + '?agentsandbox-spare').catch(() => {});
  const chunk = Buffer.alloc(1 << 16), parts = [];
  for (;;) {
    let n;
    try { n = fs.readSync(0, chunk, 0, chunk.length, null); } catch (err) {
      if (err.code !== 'EAGAIN') throw err;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 2);
      continue;
    }
    if (n === 0) process.exit(0);
    const c = chunk.subarray(0, n), nl = c.indexOf(10);
    parts.push(Buffer.from(nl >= 0 ? c.subarray(0, nl) : c));
    if (nl >= 0) break;
  }
  const h = JSON.parse(Buffer.concat(parts).toString('utf8'));
  for (const k of Object.keys(process.env)) delete process.env[k];
  Object.assign(process.env, h.env);
  process.argv = [process.execPath, ...h.args];
  await import(pathToFileURL(h.args[0]).href);
})();
`;
// The process-wide singletons' reset registry (global-singleton.ts) and the session
// disk-budget workers' key in it, for PINNED_VERSION.
const SINGLETON_RESETS = Symbol.for('openclaw.globalSingletonLifecycleResets');
const DISK_BUDGET_WORKERS = Symbol.for('openclaw.sessionDiskBudgetWorkers');
const WARM_UP_REPLY = 'OPENCLAW-PRELOAD-WARM-UP-REPLY';
const STANDBY_KEY = 'agentsandbox-standby-worker';
// The standby workers started (startStandbyWorkers), for reduceIdleMemory.
const standbys = [];
// A standby worker's bootstrap: import, say ready, wait for the claim's handover (the
// first message on its port, never seen by the entry), take its environment, re-pin,
// then (for a deferred entry) set workerData and import the entry. The port queues
// what arrives until the entry listens; a timer keeps the thread alive meanwhile (an
// entry may await its whole operation at top level, so its import settles last).
const STANDBY_BOOT = `'use strict';
const wt = require('node:worker_threads'), mod = require('node:module');
const KEY = ${JSON.stringify(STANDBY_KEY)};
const { imports, pins, entry } = wt.workerData;
const pinFns = [];
wt.parentPort.addEventListener('message', function handover(ev) {
  const h = ev.data && ev.data[KEY];
  if (!h) throw new Error('a standby worker got a message before its handover');
  ev.stopImmediatePropagation();
  if (h === 'reduce') {
    // The main thread turned --expose-gc on for this moment: a last-resort collection
    // gives back the young generation and the heap's free pages while the slot idles.
    require('node:vm').runInNewContext('gc')({ type: 'major', execution: 'sync', flavor: 'last-resort' });
    wt.parentPort.postMessage({ [KEY]: 'reduced' });
    return;
  }
  wt.parentPort.removeEventListener('message', handover);
  for (const k of Object.keys(process.env)) delete process.env[k];
  Object.assign(process.env, h.env);
  for (const pin of pinFns) pin(process.env);
  if (!entry) return;
  Object.defineProperty(wt, 'workerData', { value: h.workerData, writable: true, configurable: true, enumerable: true });
  mod.syncBuiltinESMExports();
  const alive = setInterval(() => {}, 1 << 30);
  import(entry).finally(() => clearInterval(alive)).catch((err) => { throw err; });
});
(async () => {
  for (const { url, exp } of pins) pinFns.push((await import(url))[exp]);
  for (const u of imports) await import(u);
  wt.parentPort.postMessage({ [KEY]: 'ready' });
})().catch((err) => wt.parentPort.postMessage({ [KEY]: String(err && err.stack || err) }));
`;

const fail = (msg) => { process.stderr.write(`openclaw-preload: ${msg}\n`); process.exit(125); };
const fd = Number(process.env.AGENTSANDBOX_PRELOAD_FD);
if (!Number.isInteger(fd) || fd < 3) fail('AGENTSANDBOX_PRELOAD_FD is not set: run me under sandbox-bridge -claim -preload');
delete process.env.AGENTSANDBOX_PRELOAD_FD;
// V8's code-cache tag (its version, flags and CPU features) as the process started: the
// compile cache is accepted only while it is unchanged.
const cacheTag = v8.cachedDataVersionTag();

const args = process.argv.slice(2);
const usage = 'usage: openclaw-preload.mjs [--warm-up | --warm-up-follow-up [--no-standby-workers | --standby-archive-workers] [--warm-up-default-plugins]] [--no-spare-sqlite-child] OPENCLAW_PACKAGE_DIR';
// --warm-up-follow-up: the warm-up also runs a second turn on the first turn's state.
// --no-standby-workers: the warm-up starts no standby workers (a run starts its
// worker threads after the claim, as without a warm-up): about 290 MiB less per idle
// slot, seconds more per run (docs/warm-pools-and-runtimes.md).
// --standby-archive-workers: the session archive's two workers get standbys too (STANDBY):
// about 100 MiB more per idle slot for no measured gain; the benchmarks' comparison.
// --warm-up-default-plugins: the warm-up turn's config leaves plugins to OpenClaw's
// defaults (the earlier behaviour) instead of turning them off as openclaw.NewConfig
// does: the benchmarks' comparison, for runs whose config does the same.
// --no-spare-sqlite-child: the warm-up starts no spare SQLite child
// (startSpareSqliteChild): about 65 MiB less per idle slot, about 0.3 s more per run; also
// the benchmarks' comparison and a way out should a run misbehave with one.
let warmUp = false, followUp = false, standbyWorkers = true, archiveStandbys = false, spareChild = true, defaultPlugins = false;
while (args.length > 1) {
  const a = args.shift();
  if (a === '--warm-up') warmUp = true;
  else if (a === '--warm-up-follow-up') warmUp = followUp = true;
  else if (a === '--no-standby-workers') standbyWorkers = false;
  else if (a === '--standby-archive-workers') archiveStandbys = true;
  else if (a === '--no-spare-sqlite-child') spareChild = false;
  else if (a === '--warm-up-default-plugins') defaultPlugins = true;
  else fail(usage);
}
if (!warmUp && defaultPlugins) fail(`--warm-up-default-plugins needs a warm-up: ${usage}`);
if (!warmUp && !standbyWorkers) fail(`--no-standby-workers needs a warm-up: ${usage}`);
if ((!warmUp || !standbyWorkers) && archiveStandbys) fail(`--standby-archive-workers needs a warm-up with standbys: ${usage}`);
const pkgDir = args[0];
if (!pkgDir || args.length !== 1 || pkgDir.startsWith('--')) fail(usage);
const version = JSON.parse(fs.readFileSync(path.join(pkgDir, 'package.json'), 'utf8')).version;
if (version !== PINNED_VERSION) fail(`OpenClaw ${version} is not the pinned ${PINNED_VERSION}: the split point must be proven again`);
const dist = path.join(pkgDir, 'dist');
const load = (f) => import(pathToFileURL(path.join(dist, f)).href);
const sqliteChildEntry = path.join(dist, SQLITE_CHILD.entry);
{
  const src = fs.existsSync(sqliteChildEntry) ? fs.readFileSync(sqliteChildEntry, 'utf8') : '';
  if (!src.includes(`if (process.argv[2] === ${JSON.stringify(SQLITE_CHILD.arg)}) {`)) fail(`dist/${SQLITE_CHILD.entry} no longer runs as ${SQLITE_CHILD.arg}: the spare SQLite child's table moved`);
}

// The launcher's compile cache directory: <tmp>/node-compile-cache/openclaw/<version>/
// <package.json mtime-size>, each segment reduced to [A-Za-z0-9._-].
const cacheBase = path.join(os.tmpdir(), 'node-compile-cache');
if (fs.existsSync(cacheBase) && module.enableCompileCache) {
  const seg = (v) => v.replace(/[^A-Za-z0-9._-]+/g, '_').replace(/^_+|_+$/g, '') || 'unknown';
  const st = fs.statSync(path.join(pkgDir, 'package.json'));
  const dir = path.join(cacheBase, 'openclaw', seg(version), seg(`${Math.trunc(st.mtimeMs)}-${st.size}`));
  // Recorded where the launcher records it: OpenClaw gives its worker threads (the state
  // databases', the session workers') NODE_COMPILE_CACHE from this, and without it
  // every worker of the run compiled its modules from source.
  if (module.enableCompileCache(dir)?.status === module.constants?.compileCacheStatus?.ENABLED) {
    (globalThis[Symbol.for('openclaw.nodeCompileCacheBase')] ??= {}).baseDirectory ??= path.resolve(dir);
  }
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
const warm = {};
if (warmUp) {
  for (const [name, [file, exp]] of Object.entries(WARM)) {
    const v = (await load(file))[exp];
    const ok = name === 'defaultRuntime' ? typeof v?.exit === 'function' && typeof v?.writeJson === 'function'
      : name === 'testApi' ? typeof v?.resetConfigGuardStateForTests === 'function'
        : typeof v === 'function' && v.name === name;
    if (!ok) fail(`dist/${file} export ${exp} is not ${name}: the warm-up's split point moved`);
    warm[name] = v;
  }
  await warmUpTurn();
  if (standbyWorkers) await startStandbyWorkers();
  await reduceIdleMemory();
}
// With the standbys (a slot that spends memory for speed), a spare SQLite child too.
const spare = warmUp && standbyWorkers && spareChild ? startSpareSqliteChild() : null;

// The one-shot's environment (openclaw.OneShot.Env) and config (openclaw.NewConfig's
// shape), for a throwaway layout under root and the stub at baseUrl.
function warmUpLayout(root, baseUrl) {
  const d = path.join(root, '.openclaw');
  const ws = path.join(root, 'workspace');
  for (const sub of ['state', 'home']) fs.mkdirSync(path.join(d, sub), { recursive: true });
  fs.mkdirSync(ws);
  const model = 'openclaw-preload-warm-up';
  const config = {
    agents: {
      defaults: { elevatedDefault: 'off', heartbeat: { every: '0m' }, model: { fallbacks: [], primary: `warmup/${model}` }, sandbox: { mode: 'off' }, skipBootstrap: true, timeoutSeconds: 120, workspace: ws },
      entries: { main: { workspace: ws } },
    },
    cron: { enabled: false },
    discovery: { mdns: { mode: 'off' } },
    gateway: { controlUi: { enabled: false }, mode: 'local' },
    models: {
      catalogRefresh: { enabled: false }, mode: 'replace',
      providers: { warmup: { api: 'openai-completions', apiKey: 'preload-warm-up', baseUrl, models: [{ contextWindow: 32000, cost: { cacheRead: 0, cacheWrite: 0, input: 0, output: 0 }, id: model, input: ['text'], maxTokens: 1024, name: model, reasoning: false }] } },
    },
    tools: { deny: ['browser', 'cron', 'gateway', 'group:web', 'message', 'nodes', 'sessions_send', 'sessions_spawn'], elevated: { enabled: false }, exec: { notifyOnExit: false } },
    update: { auto: { enabled: false }, checkOnStart: false },
    // Plugins off, as openclaw.NewConfig's default: a run that allows some
    // (openclaw.WithPlugins) discovers and loads them after its claim.
    plugins: defaultPlugins ? undefined : { enabled: false },
  };
  fs.writeFileSync(path.join(d, 'openclaw.json'), JSON.stringify(config));
  fs.writeFileSync(path.join(d, 'prompt.txt'), 'openclaw-preload warm-up turn: reply with anything.');
  const env = {
    HOME: path.join(d, 'home'), OPENCLAW_CONFIG_PATH: path.join(d, 'openclaw.json'), OPENCLAW_STATE_DIR: path.join(d, 'state'),
    OPENCLAW_CONFIG_READONLY: '1', OPENCLAW_LOAD_SHELL_ENV: '0', OPENCLAW_DISABLE_BONJOUR: '1', OPENCLAW_NO_AUTO_UPDATE: '1',
    OPENCLAW_SKIP_CHANNELS: '1', NO_COLOR: '1', OPENCLAW_NO_RESPAWN: '1',
  };
  if (process.env.PATH) env.PATH = process.env.PATH;
  const argv = ['agent', '--local', '--agent', 'main', '--session-id', 'openclaw-preload-warm-up', '--message-file', path.join(d, 'prompt.txt'), '--json', '--timeout', '120'];
  return { ws, env, argv, prompt: path.join(d, 'prompt.txt') };
}

// A stub of an OpenAI-compatible chat completions endpoint, as OpenClaw's
// openai-completions provider reads it (LiteLLM's shape): a streamed answer (content
// chunk, stop chunk, usage when asked, [DONE]) or a plain one. It answers every call
// with WARM_UP_REPLY, at once: a stub that failed would make OpenClaw retry for a minute.
function serveStub(calls) {
  const srv = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c) => { body += c; });
    req.on('end', () => {
      calls.push(`${req.method} ${req.url}`);
      if (req.method !== 'POST' || !/\/chat\/completions$/.test(req.url)) {
        res.writeHead(404, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { message: 'not served by the warm-up stub', type: 'not_found' } }));
        return;
      }
      let b = {};
      try { b = JSON.parse(body); } catch {}
      const id = 'chatcmpl-openclaw-preload-warm-up', created = Math.floor(Date.now() / 1000), model = String(b.model || 'openclaw-preload-warm-up');
      const usage = { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 };
      if (!b.stream) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ id, object: 'chat.completion', created, model, choices: [{ index: 0, message: { role: 'assistant', content: WARM_UP_REPLY }, finish_reason: 'stop' }], usage }));
        return;
      }
      const chunk = (delta, finish) => ({ id, object: 'chat.completion.chunk', created, model, system_fingerprint: null, choices: [{ index: 0, delta, finish_reason: finish }] });
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      res.write(`data: ${JSON.stringify(chunk({ role: 'assistant', content: WARM_UP_REPLY }, null))}\n\n`);
      res.write(`data: ${JSON.stringify(chunk({}, 'stop'))}\n\n`);
      if (b.stream_options?.include_usage) res.write(`data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model, system_fingerprint: null, choices: [], usage })}\n\n`);
      res.end('data: [DONE]\n\n');
    });
  });
  return new Promise((resolve, reject) => {
    srv.once('error', (err) => reject(new Error(`the warm-up stub cannot listen on 127.0.0.1 (is loopback up?): ${err.message}`)));
    srv.listen(0, '127.0.0.1', () => resolve(srv));
  });
}

function setEnv(env) {
  for (const k of Object.keys(process.env)) delete process.env[k];
  Object.assign(process.env, env);
}

// The warm-up: one throwaway turn, and with --warm-up-follow-up a second one on the
// state the first left (the session's transcript, the state databases), as a
// conversation's next turn or a hibernated session's resumed one finds it. OpenClaw
// 2026.9.6 takes another path then: any state database makes the `agent` command run
// its doctor's state-migration preflight (config-guard's hasLegacyStateMigrationInputs),
// whose module graph a fresh state never loads (measured: 5.6 s of a resumed run's
// config-ready step on a loaded machine).
async function warmUpTurn() {
  const calls = [];
  const stub = await serveStub(calls).catch((err) => fail(err.message));
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'openclaw-preload-warm-up-'));
  const saved = { ...process.env };
  const layout = warmUpLayout(root, `http://127.0.0.1:${stub.address().port}/v1`);
  await oneWarmUpTurn(layout, calls, 'first');
  if (followUp) {
    fs.writeFileSync(layout.prompt, 'openclaw-preload warm-up turn, followed up: reply with anything.');
    await oneWarmUpTurn(layout, calls, 'follow-up');
  }
  // The disk-budget reader's pool keeps its worker for 60 s idle, then retires it: retire
  // it now, through OpenClaw's own reset of the singleton (drain, then rotate), so every
  // run, however long after the warm-up it is claimed, gets the standby instead.
  const diskBudget = globalThis[SINGLETON_RESETS]?.get?.(DISK_BUDGET_WORKERS);
  if (typeof diskBudget?.reset !== 'function') fail('OpenClaw\'s session disk-budget workers are not in its singleton reset registry: the warm-up\'s split point moved');
  await diskBudget.reset();
  stub.closeAllConnections();
  await new Promise((resolve) => stub.close(resolve));
  process.chdir('/');
  fs.rmSync(root, { recursive: true, force: true });
  setEnv(saved);
  // What the turns left for the collector: the idle slot holds only what stays. The flag
  // goes back off at once: V8 hashes its flags into every code cache, so while it is on,
  // the compile cache (built without it) is rejected for all that the run compiles after
  // the claim, its workers' bundles included (measured: the run's turn took 2x longer).
  v8.setFlagsFromString('--expose-gc');
  const gc = vm.runInNewContext('gc');
  v8.setFlagsFromString('--no-expose-gc');
  gc();
  gc();
  if (v8.cachedDataVersionTag() !== cacheTag) fail('the warm-up left V8 flags changed: the run\'s compile cache would be rejected');
}

// oneWarmUpTurn runs one turn of the warm-up's layout in-process and closes and
// resets what it opened, as a fresh process would find it.
async function oneWarmUpTurn({ ws, env, argv }, calls, which) {
  const before = calls.length;
  setEnv(env);
  process.chdir(ws);
  process.argv = [process.execPath, path.join(dist, 'entry.js'), ...argv];
  fns.normalizeEnv();
  fns.pinRuntimePaths(process.env);
  fns.pinConfigDir(process.env);
  // The turn's JSON goes to stdout, which must stay silent before the claim: capture it.
  const write = process.stdout.write;
  const exitFn = warm.defaultRuntime.exit;
  let out = '';
  process.stdout.write = function (chunk, enc, cb) {
    if (out.length < (1 << 20)) out += typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8');
    const done = typeof enc === 'function' ? enc : cb;
    if (done) process.nextTick(done);
    return true;
  };
  const exited = new Promise((resolve) => {
    warm.defaultRuntime.exit = (code) => resolve(code);
  });
  let code;
  try {
    await fns.withCliProcessScope(() => entry.runMainOrRootHelp(process.argv, {
      loadRunCli: async () => ({ runCli: (a, opts) => runMain.runCli(a, { ...opts, runtimeRecoveryEnv: { ...env } }) }),
    }));
    code = await exited;
  } catch (err) {
    fail(`the ${which} warm-up turn failed: ${err?.stack || err}`);
  } finally {
    process.stdout.write = write;
    warm.defaultRuntime.exit = exitFn;
  }
  let text;
  try { text = JSON.parse(out).payloads?.map((p) => p.text).join(''); } catch {}
  if (code !== 0 || text !== WARM_UP_REPLY || !calls.slice(before).some((c) => c.startsWith('POST '))) {
    fail(`the ${which} warm-up turn did not answer as OpenClaw ${PINNED_VERSION} does (exit ${code}, stub calls ${JSON.stringify(calls)}): ${out.slice(0, 500)}`);
  }
  await warm.closeCliResources();
  await warm.closeOpenClawStateDatabaseAsync();
  warm.testApi.resetConfigGuardStateForTests();
  warm.resetConfigRuntimeState();
}

// reduceIdleMemory gives back what the warmed slot's isolates hold but do not use
// while it waits for its claim: V8 keeps each isolate's young generation (grown during
// the imports and the warm-up) and the free pages of its old generation committed. A
// last-resort collection (V8's gc({flavor: 'last-resort'}): memory-reducing, compacting)
// in the main thread and then in each standby, one at a time, releases them. --expose-gc
// is on only meanwhile: V8 hashes its flags into the compile cache's tag (checked
// after).
async function reduceIdleMemory() {
  if (process.env.OPENCLAW_PRELOAD_NO_REDUCE === '1') return; // measured against in the benchmarks
  v8.setFlagsFromString('--expose-gc');
  try {
    vm.runInNewContext('gc')({ type: 'major', execution: 'sync', flavor: 'last-resort' });
    for (const w of standbys) {
      await new Promise((resolve, reject) => {
        const done = (m) => { if (m?.[STANDBY_KEY] === 'reduced') { w.off('message', done); resolve(); } };
        w.on('message', done);
        w.once('error', reject);
        w.postMessage({ [STANDBY_KEY]: 'reduce' });
      });
    }
  } finally {
    v8.setFlagsFromString('--no-expose-gc');
  }
  if (v8.cachedDataVersionTag() !== cacheTag) fail('reducing idle memory left V8 flags changed: the run\'s compile cache would be rejected');
}

// Standby workers. A one-shot run starts seven worker threads after the claim (the SQLite
// carrier of the state and agent databases, the session archive's maintenance twice,
// the transcript and state-read task servers, the session disk-budget reader), each a
// fresh V8 isolate, most importing 1,100-1,600 modules: about 2 s of a run on 2 vCPUs. With --warm-up they are started
// here (all but the archive's two, which the run does not wait for: STANDBY), after the
// warm-up's cleanup, and import their graphs; at the claim a `new
// Worker` of OpenClaw's with the same script and options gets a standby instead, which
// first takes the environment (and workerData) the fresh worker would have had and
// re-pins the paths its graph captured at import, as the main thread does. Anything
// else (another script, other options, the standbys used up) gets a fresh worker.
async function startStandbyWorkers() {
  const wt = module.createRequire(import.meta.url)('node:worker_threads');
  const Fresh = wt.Worker;
  const cacheDir = globalThis[Symbol.for('openclaw.nodeCompileCacheBase')]?.baseDirectory;
  const env = { ...process.env, ...(cacheDir ? { NODE_COMPILE_CACHE: cacheDir } : {}) };
  const url = (f) => pathToFileURL(path.join(dist, f)).href;
  const pins = ['pinRuntimePaths', 'pinConfigDir'].map((name) => ({ url: url(SPLIT[name][0]), exp: SPLIT[name][1] }));
  const standby = new Map();
  const ready = [];
  for (const [entry, [count, later, deferEntry, limitsKind, optIn]] of Object.entries(STANDBY)) {
    const href = url(entry);
    if (!fs.existsSync(path.join(dist, entry))) fail(`dist/${entry} is gone: the standby workers' table moved`);
    if (optIn && !archiveStandbys) continue;
    // A deferred entry's own imports, relative ones (node: builtins cost nothing).
    const own = deferEntry ? [...fs.readFileSync(path.join(dist, entry), 'utf8').matchAll(/^import\s[^;]*?from\s+"(\.[^"]+)";/gm)].map((m) => new URL(m[1], href).href) : [];
    const imports = [...later.map(url), ...own, ...(deferEntry ? [] : [href])];
    const list = [];
    const limits = STANDBY_LIMITS[limitsKind];
    standby.set(href, { list, deferEntry, limits });
    for (let i = 0; i < count; i++) {
      const w = new Fresh(STANDBY_BOOT, { eval: true, env, execArgv: [], ...(limits ? { resourceLimits: limits } : {}), workerData: { imports, pins, entry: deferEntry ? href : '' } });
      ready.push(new Promise((resolve, reject) => {
        w.once('error', reject);
        w.once('message', (m) => {
          w.off('error', reject);
          if (m?.[STANDBY_KEY] === 'ready') resolve();
          else reject(new Error(`${entry}: ${m?.[STANDBY_KEY]}`));
        });
      }));
      w.once('exit', () => { const j = list.indexOf(w); if (j >= 0) list.splice(j, 1); });
      list.push(w);
    }
  }
  await Promise.all(ready).catch((err) => fail(`a standby worker did not start: ${err?.stack || err}`));
  for (const { list } of standby.values()) for (const w of list) standbys.push(w);
  for (const { list } of standby.values()) for (const w of list) w.unref();
  const sameLimits = (l, want) => JSON.stringify(l) === JSON.stringify(want);
  class Worker extends Fresh {
    constructor(file, opts) {
      const o = opts ?? {};
      const href = file instanceof URL ? file.href : typeof file === 'string' && !o.eval && file.startsWith('file:') ? file : '';
      const kind = standby.get(href);
      const keys = Object.keys(o).filter((k) => o[k] !== undefined);
      if (kind?.list.length && keys.every((k) => ['env', 'execArgv', 'resourceLimits', 'workerData'].includes(k))
        && !o.execArgv?.length && sameLimits(o.resourceLimits, kind.limits) && typeof o.env !== 'symbol'
        && (kind.deferEntry || o.workerData === undefined)) {
        const w = kind.list.shift();
        // What a fresh worker would have had: its options' environment or a copy of ours now.
        w.postMessage({ [STANDBY_KEY]: { env: { ...(o.env ?? process.env) }, workerData: o.workerData } });
        w.ref();
        process.nextTick(() => w.emit('online'));
        return w;
      }
      super(file, opts);
    }
  }
  wt.Worker = Worker;
  module.syncBuiltinESMExports();
}

// startSpareSqliteChild starts, after the warm-up, one spare of OpenClaw's SQLite
// read-only snapshot child (SQLITE_CHILD): a node process that imports the child's entry
// and its packages and then waits, blocked on its stdin. serve(), at the claim, replaces
// execFile: OpenClaw's first execFile of that child with the same entry, argument, modes
// and options, and an environment the same as the spare's in what a process reads at its
// start (startKey), gets the spare, which takes the arguments and the whole environment
// as OpenClaw passed them and runs the entry's main block as a fresh child would (same
// cwd, argv, stdio and maxBuffer; timeout and kill as execFile's; an error names the
// command OpenClaw asked for). Anything else, or a second one, gets a fresh child. The
// spare serves the one run that claims this slot, if that run's OpenClaw state directory
// is empty or missing (a fresh run); otherwise, or unused, it is killed.
function startSpareSqliteChild() {
  const cp = module.createRequire(import.meta.url)('node:child_process');
  const real = cp.execFile;
  const cacheDir = globalThis[Symbol.for('openclaw.nodeCompileCacheBase')]?.baseDirectory;
  // What OpenClaw will give the child: NODE_COMPILE_CACHE when the launcher's cache is in
  // use (resolveNodeCompileCacheEnv), and what its start-up adds.
  const env = { ...SQLITE_CHILD.startEnv, ...process.env };
  if (env.NODE_COMPILE_CACHE === undefined && env.NODE_DISABLE_COMPILE_CACHE === undefined && cacheDir) env.NODE_COMPILE_CACHE = cacheDir;
  let callback = null, cmd = '';
  const child = real(process.execPath, ['-e', SPARE_BOOT, sqliteChildEntry], { encoding: 'utf8', env, maxBuffer: SQLITE_CHILD.maxBuffer, killSignal: 'SIGKILL' },
    (err, stdout, stderr) => {
      if (err && cmd && err.cmd) {
        if (err.message.startsWith(`Command failed: ${err.cmd}`)) err.message = `Command failed: ${cmd}` + err.message.slice(`Command failed: ${err.cmd}`.length);
        err.cmd = cmd;
      }
      callback?.(err, stdout, stderr);
    });
  child.on('error', () => {});
  child.unref();
  for (const s of [child.stdin, child.stdout, child.stderr]) s?.unref?.();
  const sameStart = (a) => a !== null && typeof a === 'object'
    && [...new Set([...Object.keys(a), ...Object.keys(env)])].every((k) => !startKey(k) || a[k] === env[k]);
  const serves = (file, args, o, cb) => !callback && child.exitCode === null && child.signalCode === null && file === process.execPath
    && Array.isArray(args) && args.length >= 4 && args[0] === sqliteChildEntry && args[1] === SQLITE_CHILD.arg
    && SQLITE_CHILD.modes.has(args[2]) && args.every((a) => typeof a === 'string') && typeof cb === 'function'
    && Object.keys(o).every((k) => ['encoding', 'env', 'maxBuffer', 'timeout', 'killSignal'].includes(k))
    && o.encoding === 'utf8' && o.maxBuffer === SQLITE_CHILD.maxBuffer && (o.killSignal === undefined || o.killSignal === 'SIGKILL')
    && (o.timeout === undefined || (Number.isInteger(o.timeout) && o.timeout > 0)) && sameStart(o.env);
  return {
    serve() {
      // Only a run on fresh state: a turn on existing state (a conversation's next turn,
      // a resumed hibernation) starts a dozen such children, and with the spare serving
      // the first its runs were slower (BenchmarkOpenClawHibernate, docs/benchmarks.md).
      const stateDir = process.env.OPENCLAW_STATE_DIR;
      let fresh = false;
      try { fresh = !!stateDir && path.isAbsolute(stateDir) && fs.readdirSync(stateDir).length === 0; } catch (err) { fresh = err?.code === 'ENOENT'; }
      if (!fresh) {
        child.kill('SIGKILL');
        return;
      }
      process.once('exit', () => { if (!callback) child.kill('SIGKILL'); });
      cp.execFile = function execFile(file, args, options, cb) {
        const o = options ?? {};
        if (!serves(file, args, o, cb)) return real.apply(this, arguments);
        callback = cb;
        cmd = [file, ...args].join(' ');
        child.ref();
        for (const s of [child.stdin, child.stdout, child.stderr]) s?.ref?.();
        if (o.timeout) {
          const t = setTimeout(() => child.kill('SIGKILL'), o.timeout);
          child.once('close', () => clearTimeout(t));
        }
        child.stdin.write(JSON.stringify({ env: o.env, args }) + '\n');
        return child;
      };
      module.syncBuiltinESMExports();
    },
  };
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
spare?.serve();
await send({ started: true });
ctl.destroy();
await fns.withCliProcessScope(() => entry.runMainOrRootHelp(process.argv, {
  loadRunCli: async () => ({ runCli: (argv, opts) => runMain.runCli(argv, { ...opts, runtimeRecoveryEnv: runEnv }) }),
}));
