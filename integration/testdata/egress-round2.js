// The second hostile egress agent: it floods the audit with refusals, sends requests
// net/http refuses while parsing and tunnels that carry nothing, then a credentialed
// request and an SSRF attempt; it tries to place credentials where an API would store
// them, reads what an echoing upstream reflects in every spelling, and sends a Host
// header that names another host than the URL.
'use strict';
const { execFileSync } = require('child_process');
const fs = require('fs');
const net = require('net');
const tls = require('tls');

const port = process.env.UPSTREAM_PORT;
const api = `https://api.test:${port}`;
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

// raw sends bytes to the proxy and returns what comes back until it closes.
function raw(bytes, ms) {
  return new Promise((resolve) => {
    const c = net.connect(3128, '127.0.0.1');
    let got = '';
    c.setEncoding('latin1');
    c.on('data', (d) => { got += d; });
    c.on('error', () => {});
    c.on('close', () => resolve(got));
    c.write(bytes);
    setTimeout(() => c.destroy(), ms || 3000);
  });
}

// flood pipelines n refused requests over one keep-alive connection.
function flood(n) {
  return new Promise((resolve) => {
    const c = net.connect(3128, '127.0.0.1');
    let seen = 0; let tail = '';
    c.setEncoding('latin1');
    c.on('data', (d) => {
      const s = tail + d;
      seen += s.split('HTTP/1.1 403').length - 1;
      tail = s.slice(-12);
      if (seen >= n) c.end();
    });
    c.on('error', () => {});
    c.on('close', () => resolve(seen));
    c.write('GET http://evil.test/flood HTTP/1.1\r\nHost: evil.test\r\n\r\n'.repeat(n));
  });
}

// connect opens a CONNECT tunnel to host:port through the proxy.
function connect(target) {
  return new Promise((resolve, reject) => {
    const c = net.connect(3128, '127.0.0.1');
    c.on('error', reject);
    c.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`);
    let buf = '';
    const onData = (d) => {
      buf += d.toString('latin1');
      if (buf.includes('\r\n\r\n')) { c.removeListener('data', onData); resolve({ c, status: buf.split(' ')[1] }); }
    };
    c.on('data', onData);
  });
}

(async () => {
  // 1. The flood: 20,000 refusals over four connections.
  const t0 = Date.now();
  const counts = await Promise.all([5000, 5000, 5000, 5000].map(flood));
  out.flood = { answered: counts.reduce((a, b) => a + b, 0), ms: Date.now() - t0 };

  // 2. Requests the HTTP parser refuses, and tunnels without a valid request.
  out.dupHost = await raw(`GET http://api.test:${port}/v1/x HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n`);
  out.fullwidth = await raw(`GET http://ａｐｉ.test/ HTTP/1.1\r\nHost: ａｐｉ.test\r\n\r\n`);
  try {
    const { c } = await connect(`api.test:${port}`);
    out.braceInTunnel = await new Promise((resolve) => {
      const s = tls.connect({ socket: c, servername: 'api.test' }, () => {
        s.write('GET /v1/x HTTP/1.1\r\nHost: api.test\r\nX-{{b}}: 1\r\n\r\n');
      });
      let got = '';
      s.on('data', (d) => { got += d.toString('latin1'); });
      s.on('error', (e) => resolve('error ' + e));
      s.on('close', () => resolve(got));
      setTimeout(() => s.destroy(), 3000);
    });
  } catch (e) { out.braceInTunnel = 'error ' + e; }
  try {
    const { c } = await connect(`docs.test:${process.env.PLAIN_PORT}`);
    c.write('\x00\x01garbage\r\n\r\n');
    await new Promise((r) => { c.on('close', r); setTimeout(() => { c.destroy(); r(); }, 3000); });
  } catch (e) { out.garbageTunnel = 'error ' + e; }
  try {
    const { c } = await connect(`api.test:${port}`);
    c.end();
    await new Promise((r) => { c.on('close', r); setTimeout(r, 3000); });
  } catch (e) { out.emptyTunnel = 'error ' + e; }

  // 3. What the flood must not hide: a credentialed request, then an SSRF attempt.
  out.afterFlood = curl(['-H', 'Authorization: Bearer {{token}}', `${api}/v1/after-flood`]);
  out.ssrf = curl(['--noproxy', '', 'http://169.254.169.254/latest/meta-data/']);

  // 4. Credentials where a storing API would keep them: path, query, a note header,
  //    then a credential-less read through a second provider on the same backend.
  out.placePath = curl(['-X', 'PUT', `${api}/v1/store/{{token}}`]);
  out.placeQuery = curl([`${api}/v1/store?x={{token}}`]);
  out.placeHeader = curl(['-H', 'X-Note: {{token}}', `${api}/v1/store`]);
  out.readBack = curl([`https://store.test:${port}/v1/store`]);

  // 5. The reflection guard: spellings, header names, compression.
  out.reflect = curl(['-D', '-', '-H', 'Authorization: Bearer {{token}}', `${api}/v1/reflect`]);
  out.gzip = curl(['-D', '-', '-H', 'Authorization: Bearer {{token}}', `${api}/v1/gzip`]);
  out.br = curl(['-D', '-', '-H', 'Authorization: Bearer {{token}}', `${api}/v1/br`]);

  // 6. Forward mode with a Host header naming another host than the URL.
  out.hostMismatch = curl(['-D', '-', '-H', 'Host: evil.test', `http://docs.test:${process.env.PLAIN_PORT}/page`]);

  // 7. What the mount table shows.
  try { out.mountinfo = fs.readFileSync('/proc/self/mountinfo', 'utf8'); } catch (e) { out.mountinfo = String(e); }
  process.stdout.write(JSON.stringify(out));
})();
