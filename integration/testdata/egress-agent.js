// The egress acceptance agent: stock tools (Node's fetch, curl) through the proxy
// variables the runner set, attacks users reported against other sandboxes, and a
// dump of everything it can see for the host's canary scan.
'use strict';
const { execFileSync } = require('child_process');
const fs = require('fs');
const net = require('net');
const path = require('path');

const port = process.env.UPSTREAM_PORT;
const api = `https://api.test:${port}`;
const out = {};

function curl(args, env) {
  try {
    const stdout = execFileSync('/opt/curl/curl', ['-sS', '-g', '--max-time', '10', ...args], {
      env: { ...process.env, LD_LIBRARY_PATH: '/opt/curl', ...(env || {}) }, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'],
    });
    return { code: 0, out: stdout };
  } catch (e) {
    return { code: e.status, out: String(e.stdout || ''), err: String(e.stderr || '') };
  }
}

function dump(file) {
  const lines = [];
  const add = (what, s) => lines.push(`== ${what}\n${s}`);
  add('env', JSON.stringify(process.env));
  for (const pid of fs.readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    for (const f of ['environ', 'cmdline']) {
      try { add(`/proc/${pid}/${f}`, fs.readFileSync(`/proc/${pid}/${f}`, 'latin1')); } catch (e) { add(`/proc/${pid}/${f}`, `unreadable: ${e.code}`); }
    }
  }
  const walk = (dir, depth) => {
    let ents = [];
    try { ents = fs.readdirSync(dir, { withFileTypes: true }); } catch (e) { return; }
    for (const e of ents) {
      const p = path.join(dir, e.name);
      if (p === file) continue;
      if (e.isDirectory() && depth < 6) walk(p, depth + 1);
      else if (e.isFile()) {
        try { add(p, fs.readFileSync(p, 'latin1').slice(0, 1 << 20)); } catch (err) { add(p, 'unreadable'); }
      }
    }
  };
  for (const d of ['/llm-sock', '/tmp', '/workspace', '/run', '/etc', '/opt/app']) walk(d, 0);
  // The socket directory is not listable: read what the runner pointed at.
  try { add('/llm-sock/egress-ca.pem', fs.readFileSync('/llm-sock/egress-ca.pem', 'latin1')); } catch (e) { add('/llm-sock/egress-ca.pem', String(e)); }
  fs.writeFileSync(file, lines.join('\n'));
}

(async () => {
  // 1. Node's fetch through HTTPS_PROXY (NODE_USE_ENV_PROXY), TLS terminated by the
  //    run's CA (NODE_EXTRA_CA_CERTS); the upstream echoes the request back.
  try {
    const r = await fetch(`${api}/v1/fetch`, { headers: { Authorization: 'Bearer {{token}}' } });
    out.fetch = { status: r.status, body: await r.text() };
  } catch (e) { out.fetch = { error: String(e && (e.cause || e)) }; }
  try {
    const r = await fetch(`http://evil.test:${port}/`);
    out.fetchDenied = { status: r.status, body: await r.text() };
  } catch (e) { out.fetchDenied = { error: String(e && (e.cause || e)) }; }
  // 1a. Node's fetch to a plain-http provider: undici tunnels it through CONNECT.
  try {
    const r = await fetch(`http://docs.test:${process.env.PLAIN_PORT}/page`, { headers: { 'X-Key': '{{token}}' } });
    out.fetchPlain = { status: r.status, body: await r.text() };
  } catch (e) { out.fetchPlain = { error: String(e && (e.cause || e)) }; }
  // 1b. The explicit endpoint (NO_PROXY sends 127.0.0.1 straight to the bridge), with
  //     the credential placed in the body.
  try {
    const r = await fetch('http://127.0.0.1:3128/proxy', {
      method: 'POST', body: JSON.stringify({ auth: '{{token}}' }),
      headers: { 'X-Provider': 'github', 'X-Target': `${api}/v1/endpoint`, 'X-Substitute-Body': 'true', 'Content-Type': 'application/json' },
    });
    out.endpoint = { status: r.status, truncated: r.headers.get('x-truncated'), body: await r.text() };
  } catch (e) { out.endpoint = { error: String(e && (e.cause || e)) }; }
  // 2. curl, unmodified, through HTTPS_PROXY with the CA from CURL_CA_BUNDLE.
  out.curl = curl(['-H', 'Authorization: Bearer {{token}}', `${api}/v1/curl`]);
  out.curlDenied = curl([`http://evil.test:${port}/`]);
  out.curlDeniedTLS = curl([`https://evil.test:${port}/`]);
  // 3. Raw IP literals, spelled several ways, sent to the proxy (NO_PROXY would
  //    otherwise send loopback spellings to the sandbox's own loopback).
  out.ipLiterals = ['127.0.0.1', '2130706433', '0x7f.1', '127.1', '[::ffff:127.0.0.1]', '169.254.169.254', '[::1]'].map((h) => curl(['--noproxy', '', `http://${h}:${port}/`]));
  out.ipLiteralTunnel = curl(['--noproxy', '', `https://127.0.0.1:${port}/`]);
  // 4. Port scoping: the allowed host on another port.
  out.otherPort = curl([`http://api.test:1/`]);
  // 5. NO_PROXY tricks: bypassing the proxy leaves no way out (no network, no DNS).
  out.noProxy = curl(['--noproxy', '*', `${api}/v1/direct`]);
  out.noProxyEnv = curl([`${api}/v1/direct`], { NO_PROXY: '*', no_proxy: '*' });
  out.directIP = curl(['--noproxy', '*', `https://127.0.0.1:${port}/`]);
  // 6. A second proxy inside the sandbox relaying to the first: still one policy.
  const relay = net.createServer((c) => { const u = net.connect(3128, '127.0.0.1'); c.pipe(u).pipe(c); c.on('error', () => u.destroy()); u.on('error', () => c.destroy()); });
  await new Promise((res) => relay.listen(9999, '127.0.0.1', res));
  const viaRelay = (args) => new Promise((res) => {
    require('child_process').execFile('/opt/curl/curl', ['-sS', '-g', '--max-time', '10', '-x', 'http://127.0.0.1:9999', ...args],
      { env: { ...process.env, LD_LIBRARY_PATH: '/opt/curl' }, encoding: 'utf8' },
      (err, stdout, stderr) => res({ code: err ? err.code : 0, out: stdout, err: stderr }));
  });
  out.relayAllowed = await viaRelay(['-H', 'Authorization: Bearer {{token}}', `${api}/v1/relay`]);
  out.relayDenied = await viaRelay([`https://evil.test:${port}/`]);
  relay.close();
  // 7. Domain fronting: TLS to the allowed name, Host naming another one.
  out.fronting = curl(['-H', `Host: other.test:${port}`, `${api}/v1/front`]);
  dump('/workspace/dump.txt');
  process.stdout.write(JSON.stringify(out));
})();
