// One AG-UI run through @ag-ui/client's HttpAgent, which checks every event it receives against
// AG-UI's schemas and their order (a message opened before its content, a run that ends once).
// Usage: node run-agent.cjs '<plan JSON>'; the plan is
//   {url, headers, threadId, runId, messages, tools, context, resume, abortAfter}
// (`abortAfter`: abort the run once an event of that type has arrived). Prints each event as
// {"event": ...} on a line of its own, then {"result", "newMessages", "pendingInterrupts"}; on a
// failure {"error": "..."} and exit 1.
const { HttpAgent } = require("@ag-ui/client");

async function main() {
  const plan = JSON.parse(process.argv[2]);
  const agent = new HttpAgent({
    url: plan.url,
    headers: plan.headers || {},
    threadId: plan.threadId,
    initialMessages: plan.messages || [],
  });
  const print = (line) => process.stdout.write(JSON.stringify(line) + "\n");
  const subscriber = {
    onEvent: ({ event }) => {
      print({ event });
      if (plan.abortAfter && event.type === plan.abortAfter) {
        agent.abortRun();
      }
    },
  };
  const parameters = { runId: plan.runId };
  if (plan.resume) {
    parameters.resume = plan.resume;
  }
  if (plan.tools) {
    parameters.tools = plan.tools;
  }
  if (plan.context) {
    parameters.context = plan.context;
  }
  const { result, newMessages } = await agent.runAgent(parameters, subscriber);
  print({ result: result ?? null, newMessages, pendingInterrupts: agent.pendingInterrupts || [] });
}

main().catch((error) => {
  process.stdout.write(JSON.stringify({ error: String(error && error.stack ? error.stack : error) }) + "\n");
  process.exit(1);
});
