// The MCP side of scripts/bench.sh: toolvisor (`toolvisor mcp`, with audit fsync never and
// always: two workspaces) beside @modelcontextprotocol/server-filesystem and Desktop
// Commander, and a null server (the floor: a fixed answer), through the same MCP client (the official TypeScript SDK, stdio), in one run.
// Cases: read a 4 KB file, list a 100-entry directory, glob `**/*.rs` and grep `fn main`
// in a pinned source tree, write a 4 KB file, edit a 4 KB file, run `true`. Rounds
// interleave the servers (A B C D A B C D ...) so drift on a shared machine hits all alike.
//
// A peer that is not installed, does not start or fails a case's check gets no numbers
// for it and a reason instead; toolvisor failing is reported the same way (the table
// then says n/a). Writes one JSON file (OUT) that `toolvisor-bench table --mcp` reads.
//
// Env (scripts/bench.sh sets them): TV (toolvisor binary), NM (node_modules with the SDK
// and the peers), NEVER and ALWAYS (fixture roots, each with its toolvisor.toml), HOME_DC
// (a scratch home for Desktop Commander's config), N (calls per case, server and round),
// ROUNDS, OUT.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';

const env = (k, d) => {
  const v = process.env[k] ?? d;
  if (v === undefined) throw new Error(`bench_mcp.mjs: set ${k} (scripts/bench.sh does)`);
  return v;
};
const TV = env('TV');
const NM = env('NM');
const NEVER = env('NEVER');
const ALWAYS = env('ALWAYS');
const HOME_DC = env('HOME_DC');
const N = +env('N', '200');
const ROUNDS = +env('ROUNDS', '3');
const OUT = env('OUT');
const SYS_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
const CALL_TIMEOUT_MS = 120000;

const { Client } = await import(path.join(NM, '@modelcontextprotocol/sdk/dist/esm/client/index.js'));
const { StdioClientTransport } = await import(path.join(NM, '@modelcontextprotocol/sdk/dist/esm/client/stdio.js'));
const version = (pkg) => {
  try {
    return JSON.parse(fs.readFileSync(path.join(NM, pkg, 'package.json'), 'utf8')).version;
  } catch {
    return null;
  }
};

const textOf = (res) => (res.content || []).map((c) => c.text || '').join('');
const lines = (t) => t.split('\n').filter((l) => l.trim() !== '').length;
const q = (v, p) => v[Math.min(v.length - 1, Math.round((v.length - 1) * p))];
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

// A server: connected, or the reason it is not.
async function connect(name, params, setup) {
  const transport = new StdioClientTransport({ ...params, stderr: 'pipe' });
  let log = '';
  transport.stderr?.on('data', (d) => { log = (log + d).slice(-2000); });
  const client = new Client({ name: 'toolvisor-bench', version: '1.0.0' });
  try {
    await client.connect(transport);
    const s = { name, client, transport, log: () => log, call: (tool, args) => client.callTool({ name: tool, arguments: args }, undefined, { timeout: CALL_TIMEOUT_MS }) };
    if (setup) await setup(s);
    return s;
  } catch (e) {
    await client.close().catch(() => {});
    const why = `${e.message || e}`.split('\n')[0];
    return { name, failed: `did not start: ${why}${log ? ` (stderr: ${log.trim().split('\n').pop()})` : ''}` };
  }
}

const missing = (pkg, main) => (fs.existsSync(main) ? null : `${pkg} is not installed`);
const FS_PKG = '@modelcontextprotocol/server-filesystem';
const DC_PKG = '@wonderwhy-er/desktop-commander';
const FS_MAIN = path.join(NM, FS_PKG, 'dist/index.js');
const DC_MAIN = path.join(NM, DC_PKG, 'dist/index.js');

const servers = {};
for (const [name, root] of [['toolvisor_never', NEVER], ['toolvisor_always', ALWAYS]]) {
  // The bridge starts the workspace's daemon itself and stops it when it exits.
  servers[name] = await connect(name, { command: TV, args: ['mcp', '--workspace', root] });
}
// The floor: a server that answers a fixed text (scripts/bench_null_mcp.mjs).
servers.null = await connect('null', { command: process.execPath, args: [path.join(path.dirname(new URL(import.meta.url).pathname), 'bench_null_mcp.mjs'), NM] });
servers.filesystem = missing(FS_PKG, FS_MAIN)
  ? { name: 'filesystem', failed: missing(FS_PKG, FS_MAIN) }
  : await connect('filesystem', { command: process.execPath, args: [FS_MAIN, NEVER] });
fs.mkdirSync(HOME_DC, { recursive: true });
const dcEnv = { HOME: HOME_DC, PATH: SYS_PATH, SHELL: '/bin/sh', TERM: 'dumb', USER: 'root', LOGNAME: 'root', DESKTOP_COMMANDER_DISABLE_TELEMETRY: '1' };
servers.desktop_commander = missing(DC_PKG, DC_MAIN)
  ? { name: 'desktop_commander', failed: missing(DC_PKG, DC_MAIN) }
  : await connect('desktop_commander', { command: process.execPath, args: [DC_MAIN], cwd: NEVER, env: dcEnv }, async (s) => {
    for (const [key, value] of [['allowedDirectories', [NEVER]], ['telemetryEnabled', false], ['defaultShell', '/bin/sh']]) {
      const r = await s.call('set_config_value', { key, value });
      if (r.isError) throw new Error(`set_config_value ${key}: ${textOf(r).slice(0, 200)}`);
    }
  });

// Desktop Commander searches in sessions: start, then poll until complete.
async function dcSearch(s, args) {
  let t = textOf(await s.call('start_search', args));
  const m = t.match(/session: (\S+)/);
  if (!m) throw new Error('start_search: ' + t.slice(0, 200));
  while (!/Status: COMPLETED/.test(t)) {
    await sleep(1);
    const r = await s.call('get_more_search_results', { sessionId: m[1], offset: 0, length: 1 });
    t = textOf(r);
    if (r.isError) throw new Error('get_more_search_results: ' + t.slice(0, 200));
  }
  const total = t.match(/Total results found: (\d+)/);
  return { content: [{ type: 'text', text: t }], count: total ? +total[1] : null };
}

// Per-server scratch files, so no server reads another's writes.
const SMALL = 'small.txt';
const content4k = fs.readFileSync(path.join(NEVER, SMALL), 'utf8');
const editFile = (root, who) => {
  fs.mkdirSync(path.join(root, 'scratch'), { recursive: true });
  fs.writeFileSync(path.join(root, 'scratch', `${who}_edit.txt`), content4k + '\nMARKER_A\n');
  return `scratch/${who}_edit.txt`;
};
const swap = (i) => (i % 2 ? ['MARKER_B', 'MARKER_A'] : ['MARKER_A', 'MARKER_B']);
const abs = (p) => path.join(NEVER, p);
// toolvisor's cases, on either workspace (paths are workspace-relative).
const tvCases = (root, who) => {
  const edit = editFile(root, who);
  return {
    read: (s) => s.call('read_file', { path: SMALL }),
    list: (s) => s.call('ls', { path: 'dir100' }),
    glob: (s) => s.call('glob', { pattern: '**/*.rs', directory: 'medium' }),
    grep: (s) => s.call('grep', { pattern: 'fn main', directory: 'medium', caseSensitive: true }),
    write: (s) => s.call('write_file', { path: `scratch/${who}_write.txt`, content: content4k, overwrite: true }),
    edit: (s, i) => { const [a, b] = swap(i); return s.call('edit_file', { path: edit, edits: [{ target: a, replacement: b }] }); },
    run: (s) => s.call('run_command', { command: 'true' }),
  };
};
const fsEdit = editFile(NEVER, 'fs');
const dcEdit = editFile(NEVER, 'dc');
const nullCall = (s) => s.call('echo', {});
const byServer = {
  null: { read: nullCall, list: nullCall, write: nullCall, edit: nullCall },
  toolvisor_never: tvCases(NEVER, 'tvn'),
  toolvisor_always: tvCases(ALWAYS, 'tva'),
  filesystem: {
    read: (s) => s.call('read_text_file', { path: abs(SMALL) }),
    list: (s) => s.call('list_directory', { path: abs('dir100') }),
    glob: (s) => s.call('search_files', { path: abs('medium'), pattern: '**/*.rs' }),
    write: (s) => s.call('write_file', { path: abs('scratch/fs_write.txt'), content: content4k }),
    edit: (s, i) => { const [a, b] = swap(i); return s.call('edit_file', { path: abs(fsEdit), edits: [{ oldText: a, newText: b }] }); },
  },
  desktop_commander: {
    read: (s) => s.call('read_file', { path: abs(SMALL) }),
    list: (s) => s.call('list_directory', { path: abs('dir100'), depth: 1 }),
    grep: (s) => dcSearch(s, { path: abs('medium'), pattern: 'fn main', searchType: 'content', literalSearch: true, ignoreCase: false, contextLines: 0 }),
    write: (s) => s.call('write_file', { path: abs('scratch/dc_write.txt'), content: content4k, mode: 'rewrite' }),
    edit: (s, i) => { const [a, b] = swap(i); return s.call('edit_block', { file_path: abs(dcEdit), old_string: a, new_string: b }); },
    run: (s) => s.call('start_process', { command: 'true', timeout_ms: 10000 }),
  },
};
const CASES = ['read', 'list', 'glob', 'grep', 'write', 'edit', 'run'];
const heavy = (c) => c === 'glob' || c === 'grep';

// Check every case on every server before timing: an error or a missing case is a
// reason, not a crash. The result counts of glob and grep are kept for the table.
const results = {};
for (const c of CASES) {
  results[c] = {};
  for (const [who, cases] of Object.entries(byServer)) {
    const s = servers[who];
    if (!cases[c]) continue;
    if (s.failed) { results[c][who] = { failed: s.failed }; continue; }
    try {
      const r = await cases[c](s, 0);
      if (r.isError) throw new Error(textOf(r).replace(/\s+/g, ' ').slice(0, 160));
      await cases[c](s, 1);
      results[c][who] = { lat: [], count: r.count ?? (heavy(c) ? lines(textOf(r)) : null) };
    } catch (e) {
      results[c][who] = { failed: `${e.message || e}`.split('\n')[0] };
    }
  }
}

for (let round = 0; round < ROUNDS; round++) {
  for (const c of CASES) {
    for (const [who, cases] of Object.entries(byServer)) {
      const slot = results[c][who];
      if (!slot || slot.failed) continue;
      const s = servers[who];
      const n = heavy(c) ? Math.max(20, Math.round(N / 5)) : N;
      try {
        for (let i = 0; i < 5; i++) await cases[c](s, i);
        for (let i = 0; i < n; i++) {
          const t = performance.now();
          await cases[c](s, i);
          slot.lat.push(performance.now() - t);
        }
      } catch (e) {
        slot.failed = `failed in round ${round + 1}: ${`${e.message || e}`.split('\n')[0]}`;
      }
    }
  }
}

const out = {
  date: new Date().toISOString(),
  n: N,
  rounds: ROUNDS,
  versions: { sdk: version('@modelcontextprotocol/sdk'), filesystem: version(FS_PKG), desktop_commander: version(DC_PKG), node: process.version },
  servers: {},
  cases: {},
};
for (const [who, s] of Object.entries(servers)) {
  out.servers[who] = s.failed ? { failed: s.failed } : { rss_kb: treeRss(s.transport.pid) };
}
for (const c of CASES) {
  out.cases[c] = {};
  for (const [who, slot] of Object.entries(results[c])) {
    if (slot.failed) { out.cases[c][who] = { failed: slot.failed }; continue; }
    const v = slot.lat.sort((a, b) => a - b);
    out.cases[c][who] = { p50_ms: q(v, 0.5), p99_ms: q(v, 0.99), n: v.length, count: slot.count };
  }
}
fs.writeFileSync(OUT, JSON.stringify(out, null, 2));
for (const s of Object.values(servers)) if (!s.failed) await s.client.close().catch(() => {});
console.error(`bench_mcp.mjs: ${Object.keys(out.cases).length} cases measured, results in ${OUT}`);
