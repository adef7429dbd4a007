// A small MCP server on the official TypeScript SDK (installed with the reference server in
// the project's .node/), for what the reference server cannot show: the headers a call arrives
// with, and a tool list that changes while a client is connected.
//
// Streamable HTTP on 127.0.0.1:$PORT/mcp, one server per session. Its tools:
// - whoami: the SHA-256 (hex) of the Authorization and X-Api-Key headers the call arrived with,
//   so that a test can check them while no credential appears in what the turn keeps;
// - grow: adds the tool `grown` to this session's server, which tells the client
//   notifications/tools/list_changed.
const http = require("node:http");
const { createHash, randomUUID } = require("node:crypto");
const { McpServer } = require("@modelcontextprotocol/sdk/server/mcp.js");
const { StreamableHTTPServerTransport } = require("@modelcontextprotocol/sdk/server/streamableHttp.js");

function createServer() {
  const server = new McpServer(
    { name: "desk-mcp", version: "1.0.0" },
    { capabilities: { tools: { listChanged: true } } },
  );
  server.registerTool(
    "whoami",
    {
      description: "Says which credentials the call arrived with (their SHA-256).",
      annotations: { readOnlyHint: true },
    },
    async (extra) => {
      const headers = extra.requestInfo?.headers ?? {};
      const digest = (value) => (value ? createHash("sha256").update(value).digest("hex") : null);
      const seen = {
        authorization: digest(headers["authorization"]),
        apiKey: digest(headers["x-api-key"]),
      };
      return { content: [{ type: "text", text: JSON.stringify(seen) }] };
    },
  );
  let grown = false;
  server.registerTool(
    "grow",
    {
      description: "Adds the tool `grown` to this server.",
      annotations: { readOnlyHint: false, destructiveHint: false },
    },
    async () => {
      if (!grown) {
        grown = true;
        server.registerTool(
          "grown",
          {
            description: "A tool added while the client was connected.",
            annotations: { readOnlyHint: true },
          },
          async () => ({ content: [{ type: "text", text: "grown" }] }),
        );
      }
      return { content: [{ type: "text", text: "grown" }] };
    },
  );
  return server;
}

const transports = new Map();
const port = Number(process.env.PORT);

http
  .createServer(async (req, res) => {
    if (!req.url.startsWith("/mcp")) {
      res.writeHead(404).end();
      return;
    }
    const id = req.headers["mcp-session-id"];
    let transport = id && transports.get(id);
    if (!transport) {
      if (id) {
        res.writeHead(404).end();
        return;
      }
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (sessionId) => transports.set(sessionId, transport),
      });
      transport.onclose = () => transport.sessionId && transports.delete(transport.sessionId);
      await createServer().connect(transport);
    }
    await transport.handleRequest(req, res);
  })
  .listen(port, "127.0.0.1", () => console.error(`listening on port ${port}`));
