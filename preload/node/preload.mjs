// The generic Node.js preloader of agentsandbox: the preloaded side of the bridge's
// preload protocol (version 1, api/bridgeapi/preload.go), for any ESM or CommonJS entry.
//
//   node preload.mjs [--import SPECIFIER]... [--require SPECIFIER]...
//
// Before the claim it loads the given modules (dependencies with no run-dependent side
// effects: the run's environment, workspace and LLM socket do not exist yet), says
// {"ready":true} on the control channel and waits. At the claim ({"argv","env","dir"})
// it replaces process.env, changes to dir, sets process.argv, answers {"started":true}
// and runs argv[1] as Node would run `node ENTRY ARGS...` (module.runMain: ESM or CJS,
// require.main set). Node options in argv (flags before the entry) and NODE_OPTIONS in
// the claim's environment cannot apply to a running process: such a claim is refused
// ("unsupported"), as is a missing entry ("entry_not_found", naming it).
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { createRequire } from 'node:module';

const PROTOCOL = 1;
const fd = Number(process.env.AGENTSANDBOX_PRELOAD_FD);
if (!Number.isInteger(fd) || fd < 3) {
  process.stderr.write('preload.mjs: AGENTSANDBOX_PRELOAD_FD is not set: run me under sandbox-bridge -claim -preload\n');
  process.exit(125);
}
delete process.env.AGENTSANDBOX_PRELOAD_FD;

const require = createRequire(path.join(process.cwd(), 'noop.js'));
const args = process.argv.slice(2);
for (let i = 0; i < args.length; i++) {
  const spec = args[i + 1];
  if (args[i] === '--import' && spec) { await import(spec); i++; }
  else if (args[i] === '--require' && spec) { require(spec); i++; }
  else { process.stderr.write(`preload.mjs: unknown argument ${args[i]}\n`); process.exit(125); }
}

const ctl = new net.Socket({ fd, readable: true, writable: true });
const send = (v) => new Promise((resolve) => ctl.write(JSON.stringify(v) + '\n', resolve));
await send({ ready: true, protocol: PROTOCOL });

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

const refuse = async (code, entry, message) => {
  await send({ error: { code, entry, message } });
  ctl.destroy();
  process.exit(code === 'entry_not_found' ? 127 : 126);
};

const argv = Array.isArray(claim.argv) ? claim.argv : [];
const prog = path.basename(argv[0] || '');
if (!(prog === 'node' || prog === 'nodejs' || argv[0] === process.execPath)) {
  await refuse('unsupported', argv[0] || '', 'this runtime runs node only');
}
const entryArg = argv[1];
if (!entryArg || entryArg.startsWith('-')) {
  await refuse('unsupported', entryArg || '', 'node options cannot apply to a preloaded process; name the entry first');
}
const env = Array.isArray(claim.env) ? claim.env : [];
if (env.some((kv) => kv.startsWith('NODE_OPTIONS=') && kv.length > 'NODE_OPTIONS='.length)) {
  await refuse('unsupported', entryArg, 'NODE_OPTIONS cannot apply to a preloaded process');
}
const dir = claim.dir || '/';
const entry = path.resolve(dir, entryArg);
if (!fs.existsSync(entry)) {
  await refuse('entry_not_found', entry, 'no such file in the sandbox');
}

for (const k of Object.keys(process.env)) delete process.env[k];
for (const kv of env) {
  const i = kv.indexOf('=');
  if (i > 0) process.env[kv.slice(0, i)] = kv.slice(i + 1);
}
process.chdir(dir);
process.argv = [process.execPath, entry, ...argv.slice(2)];
await send({ started: true });
ctl.destroy(); // the channel ends here: the run never holds it
require('node:module').runMain(entry);
