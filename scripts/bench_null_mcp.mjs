// The floor of the MCP rows in scripts/bench.sh: an MCP server (the official TypeScript
// SDK, stdio) whose one tool `echo` answers a fixed text and does nothing else. Its p50
// is what the client, the transport and one JSON round trip cost; a server's own cost
// is its p50 minus this one's, measured in the same interleaved rounds.
//
//   node scripts/bench_null_mcp.mjs NODE_MODULES
import path from 'node:path';

const NM = process.argv[2];
if (!NM) throw new Error('usage: bench_null_mcp.mjs NODE_MODULES');
const { Server } = await import(path.join(NM, '@modelcontextprotocol/sdk/dist/esm/server/index.js'));
const { StdioServerTransport } = await import(path.join(NM, '@modelcontextprotocol/sdk/dist/esm/server/stdio.js'));
const { ListToolsRequestSchema, CallToolRequestSchema } = await import(path.join(NM, '@modelcontextprotocol/sdk/dist/esm/types.js'));

const server = new Server({ name: 'null', version: '1.0.0' }, { capabilities: { tools: {} } });
server.setRequestHandler(ListToolsRequestSchema, async () => ({
  tools: [{ name: 'echo', description: 'Answers a fixed text.', inputSchema: { type: 'object' } }],
}));
server.setRequestHandler(CallToolRequestSchema, async () => ({ content: [{ type: 'text', text: 'ok' }] }));
await server.connect(new StdioServerTransport());
