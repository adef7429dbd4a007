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
export type KnownAgentEvent = Extract<AgentEvent, {
    type: KnownEventType;
}>;
/**
 * Whether `event` is one of type `type`, its fields then typed:
 * `if (isEvent(event, "text")) show(event.delta)`.
 */
export declare function isEvent<T extends KnownEventType>(event: AgentEvent, type: T): event is Extract<KnownAgentEvent, {
    type: T;
}>;
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
export declare class ApiError extends Error {
    readonly status: number;
    readonly body: unknown;
    /** The field at fault, when one is. */
    readonly field?: string;
    /** With 409 for a conversation that runs another turn: that turn. */
    readonly runningTurnId?: string;
    constructor(status: number, body: unknown);
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
export declare class MalformedEvent extends Error {
    readonly id: string | undefined;
    readonly data: string;
    constructor(id: string | undefined, data: string);
}
/** The stream said the turn never started: no terminal will come. */
export declare class TurnNotStarted extends Error {
    readonly turnId: string;
    constructor(turnId: string);
}
/** A client of one host. */
export declare class AgentWorkerClient {
    private readonly options;
    private readonly fetcher;
    constructor(options?: ClientOptions);
    private headers;
    private url;
    private call;
    /** Sends a turn: it runs on the host, or goes to the turns queue (202 either way). */
    acceptTurn(turn: TurnRequest): Promise<TurnAccepted>;
    /** Asks the person's turn to stop (`user_stop`, or `superseded`). */
    stopTurn(turnId: string, session: string, reason?: "user_stop" | "superseded"): Promise<StopRecorded>;
    /** The tab's answer to a UI action the turn asked for. */
    answerAction(turnId: string, callId: string, session: string, answer: ActionAnswer): Promise<ActionRecorded>;
    /** The person's conversations, most recent first. */
    listConversations(page?: {
        limit?: number;
        cursor?: string;
    }): Promise<ConversationPage>;
    /** One conversation in display form: its newest messages before `before`. */
    getConversation(id: string, page?: {
        limit?: number;
        before?: number;
    }): Promise<ConversationView>;
    /** Deletes a conversation with its files. */
    deleteConversation(id: string): Promise<Deleted>;
    /** Keeps a file the person attaches: its reference, for a turn's `attachments`. */
    uploadFile(conversation: string, file: Blob, name: string): Promise<AttachmentRef>;
    /** Steers the running turn, adds a follow-up, or aborts it. */
    sendCommand(session: string, command: SessionCommand): Promise<CommandAnswer>;
    /** Whether the conversation runs a turn. */
    sessionState(session: string): Promise<SessionState>;
    /** The conversation's durable history from `since`. */
    sessionEntries(session: string, page?: {
        since?: number;
        limit?: number;
    }): Promise<Entries>;
    /** The host's health. */
    health(): Promise<Health>;
    /**
     * A turn's events, from its log, to its terminal (`completed` or `failed`), which ends the
     * iteration. A stream that drops is opened again after the last event given (`Last-Event-ID`),
     * up to `retries` times in a row: no event is lost or given twice.
     */
    events(turnId: string, options: EventsOptions): AsyncGenerator<StreamedEvent, void, undefined>;
}
export {};
