// Checked by `tsc -p test` (tests/typescript_client.rs): the README's loop compiles under
// `strict`. Narrowed by `isEvent`, an event's fields are typed; not narrowed, they are not.
import { AgentWorkerClient, isEvent, type AgentEvent } from "../src/index.js";

export async function follow(client: AgentWorkerClient, turnId: string, session: string): Promise<string> {
  let text = "";
  for await (const { event } of client.events(turnId, { session })) {
    if (isEvent(event, "text")) text += event.delta;
    if (isEvent(event, "failed")) throw new Error(event.details);
  }
  return text;
}

// @ts-expect-error: an event not narrowed has no typed `delta`.
export const unnarrowed = (event: AgentEvent): string => event.delta;
