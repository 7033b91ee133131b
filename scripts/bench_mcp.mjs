// toolvisor through `toolvisor mcp` beside @modelcontextprotocol/server-filesystem,
// through the same MCP client (the official TypeScript SDK, stdio), in one run: read a
// 4 KB file, list a 100-entry directory, write a 4 KB file, edit a 4 KB file. Rounds
// alternate the servers so drift on a shared machine hits both alike.
//
// Run by scripts/bench-mcp.sh, which installs the packages and makes the fixtures.
// Env: TV (toolvisor binary), NM (node_modules), ROOT (fixtures), N, ROUNDS, OUT.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';

const TV = process.env.TV;
const NM = process.env.NM;
const ROOT = process.env.ROOT;
const N = +(process.env.N || 300);
const ROUNDS = +(process.env.ROUNDS || 3);
const OUT = process.env.OUT;
if (!TV || !NM || !ROOT) throw new Error('set TV, NM and ROOT (scripts/bench-mcp.sh does)');
const { Client } = await import(path.join(NM, '@modelcontextprotocol/sdk/dist/esm/client/index.js'));
const { StdioClientTransport } = await import(path.join(NM, '@modelcontextprotocol/sdk/dist/esm/client/stdio.js'));
const FS_MAIN = path.join(NM, '@modelcontextprotocol/server-filesystem/dist/index.js');

const SMALL = path.join(ROOT, 'small.txt');
const content4k = fs.readFileSync(SMALL, 'utf8');
const SCR = path.join(ROOT, 'scratch');
fs.mkdirSync(SCR, { recursive: true });
const textOf = (res) => (res.content || []).map((c) => c.text || '').join('');
const quantile = (v, p) => v[Math.min(v.length - 1, Math.round((v.length - 1) * p))];

// RSS in KB of a process and all its descendants.
function treeRss(pid) {
  const rows = execFileSync('ps', ['-e', '-o', 'pid=,ppid=,rss='])
    .toString().trim().split('\n').map((l) => l.trim().split(/\s+/).map(Number));
  const kids = new Map();
  for (const [p, pp] of rows) { if (!kids.has(pp)) kids.set(pp, []); kids.get(pp).push(p); }
  const rss = new Map(rows.map(([p, , r]) => [p, r]));
  let sum = 0;
  const stack = [pid];
  while (stack.length) { const p = stack.pop(); sum += rss.get(p) || 0; for (const k of kids.get(p) || []) stack.push(k); }
  return sum;
}

async function connect(params) {
  const transport = new StdioClientTransport({ ...params, stderr: 'pipe' });
  const client = new Client({ name: 'bench-mcp', version: '1.0.0' });
  await client.connect(transport);
  return { client, transport, call: (name, args) => client.callTool({ name, arguments: args }, undefined, { timeout: 120000 }) };
}

// toolvisor: the bridge starts the daemon itself (and stops it at the end).
fs.writeFileSync(path.join(ROOT, 'toolvisor.toml'),
  '[policy]\nmode = "yolo"\n[audit]\nfsync = "' + (process.env.TV_FSYNC || 'never') + '"\n');
const tv = await connect({ command: TV, args: ['mcp', '--workspace', ROOT] });
const fsrv = await connect({ command: process.execPath, args: [FS_MAIN, ROOT] });

const editFile = (who) => { const p = path.join(SCR, `${who}_edit.txt`); fs.writeFileSync(p, content4k + '\nMARKER_A\n'); return p; };
const E = { tv: editFile('tv'), fs: editFile('fs') };
const swap = (i) => (i % 2 ? ['MARKER_B', 'MARKER_A'] : ['MARKER_A', 'MARKER_B']);
const cases = {
  'read 4 KB file': {
    toolvisor: () => tv.call('read_file', { path: 'small.txt' }),
    filesystem: () => fsrv.call('read_text_file', { path: SMALL }),
  },
  'list 100-entry dir': {
    toolvisor: () => tv.call('ls', { path: 'dir100' }),
    filesystem: () => fsrv.call('list_directory', { path: path.join(ROOT, 'dir100') }),
  },
  'write 4 KB file': {
    toolvisor: () => tv.call('write_file', { path: 'scratch/tv_write.txt', content: content4k, overwrite: true }),
    filesystem: () => fsrv.call('write_file', { path: path.join(SCR, 'fs_write.txt'), content: content4k }),
  },
  'edit 4 KB file (one replacement)': {
    toolvisor: (i) => { const [a, b] = swap(i); return tv.call('edit_file', { path: path.relative(ROOT, E.tv), edits: [{ target: a, replacement: b }] }); },
    filesystem: (i) => { const [a, b] = swap(i); return fsrv.call('edit_file', { path: E.fs, edits: [{ oldText: a, newText: b }] }); },
  },
};

// Every case must work on both before anything is timed.
for (const [name, by] of Object.entries(cases)) {
  for (const [who, fn] of Object.entries(by)) {
    for (let i = 0; i < 2; i++) {
      const r = await fn(i);
      if (r.isError) throw new Error(`${who} / ${name}: ${textOf(r).slice(0, 300)}`);
    }
  }
}

const lat = {};
for (let round = 0; round < ROUNDS; round++) {
  for (const [name, by] of Object.entries(cases)) {
    for (const [who, fn] of Object.entries(by)) {
      for (let i = 0; i < 10; i++) await fn(i);
      const key = `${name}|${who}`;
      lat[key] ||= [];
      for (let i = 0; i < N; i++) { const t = performance.now(); await fn(i); lat[key].push(performance.now() - t); }
    }
  }
}

const rss = { toolvisor: treeRss(tv.transport.pid), filesystem: treeRss(fsrv.transport.pid) };
const out = { date: new Date().toISOString(), N, ROUNDS, tv_fsync: process.env.TV_FSYNC || 'never', rows: [], rss_kb: rss };
console.log('| case | toolvisor mcp p50 / p99 ms | server-filesystem p50 / p99 ms | filesystem ÷ toolvisor (p50) |');
console.log('|---|---|---|---|');
for (const name of Object.keys(cases)) {
  const cell = (who) => { const v = lat[`${name}|${who}`].sort((a, b) => a - b); return { p50: quantile(v, 0.5), p99: quantile(v, 0.99), n: v.length }; };
  const t = cell('toolvisor');
  const f = cell('filesystem');
  const fmt = (c) => `${c.p50.toFixed(2)} / ${c.p99.toFixed(2)}`;
  console.log(`| ${name} | ${fmt(t)} | ${fmt(f)} | ${(f.p50 / t.p50).toFixed(2)}× |`);
  out.rows.push({ name, toolvisor: t, filesystem: f, filesystem_over_toolvisor: f.p50 / t.p50 });
}
console.log(`RSS after the run (KB, process trees): toolvisor mcp + daemon + workers ${rss.toolvisor}, server-filesystem ${rss.filesystem}`);
if (OUT) fs.writeFileSync(OUT, JSON.stringify(out, null, 2));
await tv.client.close();
await fsrv.client.close();
