// A typed client for agent-worker's HTTP API (`serve`, the API function). Its types are the
// OpenAPI document's (`src/api.ts`, generated from docs/openapi.json by openapi-typescript); the
// client adds the calls and a turn's event stream, resumed after a dropped connection from the
// last event it gave (`Last-Event-ID`), so that no event is lost or given twice.

import type { components } from "./api.js";

type Schemas = components["schemas"];
/**
 * One event of a turn, as the host sends it: one of the events this API defines
 * ({@link KnownAgentEvent}), or an event of another `type` (an extension: `approval_required`,
 * `ui_action_requested`, ...), forwarded as it came. Narrow it with {@link isEvent}.
 */
export type AgentEvent = Schemas["AgentEvent"];
/** The `type`s this API defines; `completed` and `failed` are the terminals. */
export type KnownEventType = "text" | "thinking" | "tool_started" | "tool_ended" | "retrying" | "usage" | "completed" | "failed";
/** The events this API defines, each narrowed by its `type`. */
export type KnownAgentEvent = Extract<AgentEvent, { type: KnownEventType }>;

/**
 * Whether `event` is one of type `type`, its fields then typed:
 * `if (isEvent(event, "text")) show(event.delta)`.
 */
export function isEvent<T extends KnownEventType>(
  event: AgentEvent,
  type: T,
): event is Extract<KnownAgentEvent, { type: T }> {
  return event.type === type;
}
/** The body of `POST /turns`. */
export type TurnRequest = Schemas["TurnRequest"];
export type TurnAccepted = Schemas["TurnAccepted"];
export type StopRecorded = Schemas["StopRecorded"];
export type ActionAnswer = Schemas["ActionAnswer"];
export type ActionRecorded = Schemas["ActionRecorded"];
export type AttachmentRef = Schemas["AttachmentRef"];
export type PresignedFile = Schemas["PresignedFile"];
export type ConversationPage = Schemas["ConversationPage"];
export type ConversationView = Schemas["ConversationView"];
export type Deleted = Schemas["Deleted"];
export type SessionCommand = Schemas["SessionCommand"];
/** A command's answer: kept (`ok: true`), or refused (`ok: false`, and why). */
export type CommandAnswer = Schemas["CommandKept"] | Schemas["CommandRefused"];
export type SessionState = Schemas["SessionState"];
export type Entries = Schemas["Entries"];
export type Health = Schemas["Health"];
export type ErrorBody = Schemas["ErrorBody"];

/** The person a request stands for, where the backend's key names them. */
export interface Person {
  userId: string;
  accountId: string;
}

/** How the client reaches the host, and as whom. */
export interface ClientOptions {
  /** The host's origin (`https://agents.example.com`); the page's own when left out. */
  baseUrl?: string;
  /** The product's backend key (`x-api-key`): `person` names whom each call is for. */
  apiKey?: string;
  /** A person's own token (`Authorization: Bearer`), or a function giving a fresh one. */
  token?: string | (() => string | Promise<string>);
  /** The console's token (`x-console-token`). */
  consoleToken?: string;
  /** The person, named in the query (with `apiKey`; a token stands for its own person). */
  person?: Person;
  /** The fetch to use (the global one when left out). */
  fetch?: typeof fetch;
}

/** A refusal or failure of the host, in its one error shape. */
export class ApiError extends Error {
  readonly status: number;
  readonly body: unknown;
  /** The field at fault, when one is. */
  readonly field?: string;
  /** With 409 for a conversation that runs another turn: that turn. */
  readonly runningTurnId?: string;

  constructor(status: number, body: unknown) {
    const error = body as Partial<ErrorBody> | null;
    super(typeof error?.error === "string" ? error.error : `the host answered ${status}`);
    this.name = "ApiError";
    this.status = status;
    this.body = body;
    this.field = error?.field ?? undefined;
    this.runningTurnId = error?.runningTurnId ?? undefined;
  }
}

/** One event of a turn's stream, with its position (its SSE id). */
export interface StreamedEvent {
  /** Its position in the turn's log: a stream resumed after it starts with the next. */
  id: number;
  event: AgentEvent;
}

/** Where a turn's event stream starts, and how it may resume. */
export interface EventsOptions {
  /** The conversation the turn is of. */
  session: string;
  /** The events after this position (the last one a caller holds); from the first when left out. */
  after?: number;
  /**
   * How many times in a row a dropped stream is opened again before the error is thrown (5;
   * `Infinity` for a page that follows a turn for as long as it is open). A host at its cap of
   * streams (429, 503) counts as a drop.
   */
  retries?: number;
  /** The first wait before opening it again, in milliseconds, doubled each time (250)... */
  retryDelayMs?: number;
  /** ...up to this (5000). */
  maxRetryDelayMs?: number;
  /** Stops the stream. */
  signal?: AbortSignal;
}

/** An event the host sent that is not JSON: opening the stream again would give it again. */
export class MalformedEvent extends Error {
  constructor(readonly id: string | undefined, readonly data: string) {
    super(`event ${id ?? "(no id)"} is not JSON: ${data.slice(0, 80)}`);
    this.name = "MalformedEvent";
  }
}

/** The stream said the turn never started: no terminal will come. */
export class TurnNotStarted extends Error {
  constructor(readonly turnId: string) {
    super(`turn ${turnId} never started`);
    this.name = "TurnNotStarted";
  }
}

const TERMINALS = new Set(["completed", "failed"]);

/** A client of one host. */
export class AgentWorkerClient {
  private readonly options: ClientOptions;
  private readonly fetcher: typeof fetch;

  constructor(options: ClientOptions = {}) {
    this.options = options;
    this.fetcher = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  private async headers(extra: Record<string, string> = {}): Promise<Record<string, string>> {
    const headers: Record<string, string> = { ...extra };
    const { apiKey, token, consoleToken } = this.options;
    if (apiKey) headers["x-api-key"] = apiKey;
    if (consoleToken) headers["x-console-token"] = consoleToken;
    if (token) headers.authorization = `Bearer ${typeof token === "function" ? await token() : token}`;
    return headers;
  }

  private url(path: string, query: Record<string, string | number | undefined> = {}): string {
    const params = new URLSearchParams();
    const person = this.options.person;
    if (person) {
      params.set("userId", person.userId);
      params.set("accountId", person.accountId);
    }
    for (const [key, value] of Object.entries(query)) {
      if (value !== undefined) params.set(key, String(value));
    }
    const search = params.toString();
    return `${this.options.baseUrl ?? ""}${path}${search ? `?${search}` : ""}`;
  }

  private async call<T>(method: string, path: string, init: {
    query?: Record<string, string | number | undefined>;
    json?: unknown;
    body?: BodyInit;
    contentType?: string;
  } = {}): Promise<T> {
    const extra: Record<string, string> = {};
    let body = init.body;
    if (init.json !== undefined) {
      extra["content-type"] = "application/json";
      body = JSON.stringify(init.json);
    } else if (init.contentType) {
      extra["content-type"] = init.contentType;
    }
    const response = await this.fetcher(this.url(path, init.query), {
      method,
      headers: await this.headers(extra),
      body,
    });
    const text = await response.text();
    let data: unknown = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = { error: text };
    }
    if (!response.ok) throw new ApiError(response.status, data);
    return data as T;
  }

  /** Sends a turn: it runs on the host, or goes to the turns queue (202 either way). */
  acceptTurn(turn: TurnRequest): Promise<TurnAccepted> {
    return this.call("POST", "/turns", { json: turn });
  }

  /** Asks the person's turn to stop (`user_stop`, or `superseded`). */
  stopTurn(turnId: string, session: string, reason?: "user_stop" | "superseded"): Promise<StopRecorded> {
    return this.call("POST", `/turns/${encodeURIComponent(turnId)}/stop`, {
      query: { session },
      json: reason === undefined ? {} : { reason },
    });
  }

  /** The tab's answer to a UI action the turn asked for. */
  answerAction(turnId: string, callId: string, session: string, answer: ActionAnswer): Promise<ActionRecorded> {
    return this.call("POST", `/turns/${encodeURIComponent(turnId)}/actions/${encodeURIComponent(callId)}`, {
      query: { session },
      json: answer,
    });
  }

  /** The person's conversations, most recent first. */
  listConversations(page: { limit?: number; cursor?: string } = {}): Promise<ConversationPage> {
    return this.call("GET", "/conversations", { query: page });
  }

  /** One conversation in display form: its newest messages before `before`. */
  getConversation(id: string, page: { limit?: number; before?: number } = {}): Promise<ConversationView> {
    return this.call("GET", `/conversations/${encodeURIComponent(id)}`, { query: page });
  }

  /** Deletes a conversation with its files. */
  deleteConversation(id: string): Promise<Deleted> {
    return this.call("DELETE", `/conversations/${encodeURIComponent(id)}`);
  }

  /** Keeps a file the person attaches: its reference, for a turn's `attachments`. */
  uploadFile(conversation: string, file: Blob, name: string): Promise<AttachmentRef> {
    return this.call("POST", `/conversations/${encodeURIComponent(conversation)}/files`, {
      query: { name },
      body: file,
      contentType: file.type || "application/octet-stream",
    });
  }

  /** Steers the running turn, adds a follow-up, or aborts it. */
  async sendCommand(session: string, command: SessionCommand): Promise<CommandAnswer> {
    try {
      return await this.call("POST", `/sessions/${encodeURIComponent(session)}/commands`, { json: command });
    } catch (e) {
      // A refused command answers in its own shape: it is the answer, not a failure of the call.
      if (e instanceof ApiError && (e.body as { ok?: boolean } | null)?.ok === false) return e.body as CommandAnswer;
      throw e;
    }
  }

  /** Whether the conversation runs a turn. */
  sessionState(session: string): Promise<SessionState> {
    return this.call("GET", `/sessions/${encodeURIComponent(session)}/state`);
  }

  /** The conversation's durable history from `since`. */
  sessionEntries(session: string, page: { since?: number; limit?: number } = {}): Promise<Entries> {
    return this.call("GET", `/sessions/${encodeURIComponent(session)}/entries`, { query: page });
  }

  /** The host's health. */
  health(): Promise<Health> {
    return this.call("GET", "/health");
  }

  /**
   * A turn's events, from its log, to its terminal (`completed` or `failed`), which ends the
   * iteration. A stream that drops is opened again after the last event given (`Last-Event-ID`),
   * up to `retries` times in a row: no event is lost or given twice.
   */
  async *events(turnId: string, options: EventsOptions): AsyncGenerator<StreamedEvent, void, undefined> {
    let last = options.after;
    const retries = options.retries ?? 5;
    let failures = 0;
    for (;;) {
      try {
        const extra: Record<string, string> = { accept: "text/event-stream" };
        if (last !== undefined) extra["last-event-id"] = String(last);
        const response = await this.fetcher(
          this.url(`/turns/${encodeURIComponent(turnId)}/events`, { session: options.session }),
          { headers: await this.headers(extra), signal: options.signal },
        );
        if (!response.ok) {
          const text = await response.text();
          let data: unknown = { error: text };
          try {
            data = JSON.parse(text);
          } catch {
            // Not JSON: kept as the error's text.
          }
          throw new ApiError(response.status, data);
        }
        if (!response.body) throw new Error("the event stream has no body");
        for await (const message of sseMessages(response.body)) {
          if (message.event === "stream_ended") throw new TurnNotStarted(turnId);
          if (message.id === undefined) continue;
          const id = Number(message.id);
          let event: AgentEvent;
          try {
            event = JSON.parse(message.data) as AgentEvent;
          } catch {
            throw new MalformedEvent(message.id, message.data);
          }
          last = id;
          failures = 0;
          yield { id, event };
          if (TERMINALS.has((event as { type: string }).type)) return;
        }
        throw new Error(`the event stream of turn ${turnId} ended before its terminal`);
      } catch (e) {
        const atCap = e instanceof ApiError && (e.status === 429 || e.status === 503);
        if ((e instanceof ApiError && !atCap) || e instanceof TurnNotStarted || e instanceof MalformedEvent) throw e;
        if (options.signal?.aborted || failures >= retries) throw e;
      }
      // The stream dropped before the terminal: open it again after the last event given.
      const wait = Math.min((options.retryDelayMs ?? 250) * 2 ** failures, options.maxRetryDelayMs ?? 5000);
      failures += 1;
      await new Promise((resolve) => setTimeout(resolve, wait));
    }
  }
}

/** One Server-Sent Events message. */
interface SseMessage {
  id?: string;
  event: string;
  data: string;
}

/** The messages of an SSE body, as they come (comments, the host's keep-alives, skipped). */
async function* sseMessages(body: ReadableStream<Uint8Array>): AsyncGenerator<SseMessage> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  // A `\r` that ends a chunk waits for the next: it may be the first half of `\r\n`.
  let held = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      let text = held + decoder.decode(value, { stream: true });
      held = text.endsWith("\r") ? "\r" : "";
      if (held) text = text.slice(0, -1);
      buffer += text.replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const message: SseMessage = { event: "message", data: "" };
        const data: string[] = [];
        for (const line of block.split("\n")) {
          if (!line || line.startsWith(":")) continue;
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
          if (field === "id") message.id = text;
          else if (field === "event") message.event = text;
          else if (field === "data") data.push(text);
        }
        if (data.length === 0) continue;
        message.data = data.join("\n");
        yield message;
      }
    }
  } finally {
    // Done with it (a terminal, or the caller stopped): the connection is closed.
    await reader.cancel().catch(() => undefined);
  }
}
