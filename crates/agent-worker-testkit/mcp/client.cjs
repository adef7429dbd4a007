// The official MCP TypeScript SDK's client (from the project's .node), run against agent-worker's
// MCP server as an MCP host runs it: it connects over Streamable HTTP (initialize, then each
// request), lists the tools, and calls those the plan names. The plan is the one argument:
// {url, headers, elicit, calls: [{name, arguments, progress, cancelOnProgress}]} (with `progress`,
// the call's progress notifications are kept in its result's `progress`; with `elicit`, the
// client declares elicitation and answers each one with that action: "accept", "decline" or
// "cancel"). It prints one JSON line: {server, protocol, session, tools, results, elicited} (a
// call the client threw on is {thrown, code}; `elicited` the elicitations' requests), or {error}
// when it could not connect.
const { Client } = require("@modelcontextprotocol/sdk/client");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");
const { ElicitRequestSchema } = require("@modelcontextprotocol/sdk/types.js");

async function main() {
  const plan = JSON.parse(process.argv[2]);
  const capabilities = plan.elicit ? { elicitation: { form: {} } } : {};
  const client = new Client({ name: "agent-worker-tests", version: "1.0.0" }, { capabilities });
  const elicited = [];
  if (plan.elicit) {
    client.setRequestHandler(ElicitRequestSchema, async (request) => {
      elicited.push(request.params);
      return { action: plan.elicit };
    });
  }
  const transport = new StreamableHTTPClientTransport(new URL(plan.url), {
    requestInit: { headers: plan.headers || {} },
  });
  // Every message the client sends is awaited before it closes (a cancellation is sent without
  // waiting: closing at once would abort it on its way).
  const sent = [];
  const send = transport.send.bind(transport);
  transport.send = (message, options) => {
    const sending = send(message, options);
    sent.push(sending.catch(() => {}));
    return sending;
  };
  try {
    await client.connect(transport);
    const listed = await client.listTools();
    const out = {
      server: client.getServerVersion(),
      protocol: transport.protocolVersion,
      session: transport.sessionId || null,
      tools: listed.tools.map((t) => t.name),
      results: [],
    };
    for (const call of plan.calls || []) {
      try {
        // With `progress`, the call asks for progress notifications and keeps them.
        // With `cancelOnProgress`, it is cancelled (aborted: the SDK sends
        // notifications/cancelled) at its first progress notification.
        const progress = [];
        const aborting = new AbortController();
        const onprogress = (p) => {
          progress.push(p);
          if (call.cancelOnProgress) aborting.abort("the test cancels it");
        };
        const options = call.progress ? { onprogress, signal: aborting.signal } : undefined;
        const result = await client.callTool({ name: call.name, arguments: call.arguments }, undefined, options);
        if (call.progress) result.progress = progress;
        out.results.push(result);
      } catch (e) {
        out.results.push({ thrown: String((e && e.message) || e), code: e && e.code });
      }
    }
    out.elicited = elicited;
    await Promise.all(sent);
    await client.close();
    console.log(JSON.stringify(out));
  } catch (e) {
    console.log(JSON.stringify({ error: String((e && e.stack) || e) }));
  }
}

main();
