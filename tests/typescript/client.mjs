// The typed client (clients/typescript, as built in dist/) against a live host: a turn sent and
// its events streamed, the same stream dropped after its first event and resumed, a stream from
// a position, the conversations, a refusal as an ApiError. Run by tests/typescript_client.rs,
// which starts the host and reads what this prints (one JSON object).
import { AgentWorkerClient, ApiError } from "../../clients/typescript/dist/index.js";

const [url, key, session] = process.argv.slice(2);
const person = { userId: "u", accountId: "a" };
const client = new AgentWorkerClient({ baseUrl: url, apiKey: key, person });
const out = {};

const collect = async (stream) => {
  const got = [];
  for await (const { id, event } of stream) got.push({ id, type: event.type });
  return got;
};

out.accepted = await client.acceptTurn({
  turnId: "t-1", conversationId: session, userId: person.userId, accountId: person.accountId, content: "Hi",
});
out.events = await collect(client.events("t-1", { session }));

// A fetch whose first event stream drops after its first event, as a connection cut mid-turn.
const asked = [];
const dropping = async (input, init) => {
  const response = await fetch(input, init);
  const isStream = String(input).includes("/events");
  if (isStream) asked.push(init.headers["last-event-id"] ?? null);
  if (!isStream || asked.length > 1) return response;
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  const encoder = new TextEncoder();
  // What came so far, and how much of it went through.
  let seen = "";
  let passed = 0;
  const body = new ReadableStream({
    async pull(controller) {
      const { value, done } = await reader.read();
      if (done) return controller.close();
      seen += decoder.decode(value, { stream: true });
      const end = seen.indexOf("\n\n");
      // Exactly the first event goes through, then the connection is gone.
      const upTo = end < 0 ? seen.length : end + 2;
      controller.enqueue(encoder.encode(seen.slice(passed, upTo)));
      passed = upTo;
      if (end < 0) return;
      await reader.cancel();
      controller.error(new TypeError("the connection dropped"));
    },
  });
  return new Response(body, { status: response.status, headers: response.headers });
};
const resuming = new AgentWorkerClient({ baseUrl: url, apiKey: key, person, fetch: dropping });
out.resumed = await collect(resuming.events("t-1", { session, retryDelayMs: 10 }));
out.asked = asked;

out.after = await collect(client.events("t-1", { session, after: 1 }));
out.listed = (await client.listConversations()).conversations.map((c) => c.id);
out.view = (await client.getConversation(session)).messages.map((m) => m.role);
try {
  await client.getConversation(`${session}-nobodys`);
} catch (e) {
  out.refused = { isApiError: e instanceof ApiError, status: e.status, message: e.message };
}
console.log(JSON.stringify(out));
