// A typed client for agent-worker's HTTP API (`serve`, the API function). Its types are the
// OpenAPI document's (`src/api.ts`, generated from docs/openapi.json by openapi-typescript); the
// client adds the calls and a turn's event stream, resumed after a dropped connection from the
// last event it gave (`Last-Event-ID`), so that no event is lost or given twice.
/**
 * Whether `event` is one of type `type`, its fields then typed:
 * `if (isEvent(event, "text")) show(event.delta)`.
 */
export function isEvent(event, type) {
    return event.type === type;
}
/** A refusal or failure of the host, in its one error shape. */
export class ApiError extends Error {
    status;
    body;
    /** The field at fault, when one is. */
    field;
    /** With 409 for a conversation that runs another turn: that turn. */
    runningTurnId;
    constructor(status, body) {
        const error = body;
        super(typeof error?.error === "string" ? error.error : `the host answered ${status}`);
        this.name = "ApiError";
        this.status = status;
        this.body = body;
        this.field = error?.field ?? undefined;
        this.runningTurnId = error?.runningTurnId ?? undefined;
    }
}
/** An event the host sent that is not JSON: opening the stream again would give it again. */
export class MalformedEvent extends Error {
    id;
    data;
    constructor(id, data) {
        super(`event ${id ?? "(no id)"} is not JSON: ${data.slice(0, 80)}`);
        this.id = id;
        this.data = data;
        this.name = "MalformedEvent";
    }
}
/** The stream said the turn never started: no terminal will come. */
export class TurnNotStarted extends Error {
    turnId;
    constructor(turnId) {
        super(`turn ${turnId} never started`);
        this.turnId = turnId;
        this.name = "TurnNotStarted";
    }
}
const TERMINALS = new Set(["completed", "failed"]);
/** A client of one host. */
export class AgentWorkerClient {
    options;
    fetcher;
    constructor(options = {}) {
        this.options = options;
        this.fetcher = options.fetch ?? globalThis.fetch.bind(globalThis);
    }
    async headers(extra = {}) {
        const headers = { ...extra };
        const { apiKey, token, consoleToken } = this.options;
        if (apiKey)
            headers["x-api-key"] = apiKey;
        if (consoleToken)
            headers["x-console-token"] = consoleToken;
        if (token)
            headers.authorization = `Bearer ${typeof token === "function" ? await token() : token}`;
        return headers;
    }
    url(path, query = {}) {
        const params = new URLSearchParams();
        const person = this.options.person;
        if (person) {
            params.set("userId", person.userId);
            params.set("accountId", person.accountId);
        }
        for (const [key, value] of Object.entries(query)) {
            if (value !== undefined)
                params.set(key, String(value));
        }
        const search = params.toString();
        return `${this.options.baseUrl ?? ""}${path}${search ? `?${search}` : ""}`;
    }
    async call(method, path, init = {}) {
        const extra = {};
        let body = init.body;
        if (init.json !== undefined) {
            extra["content-type"] = "application/json";
            body = JSON.stringify(init.json);
        }
        else if (init.contentType) {
            extra["content-type"] = init.contentType;
        }
        const response = await this.fetcher(this.url(path, init.query), {
            method,
            headers: await this.headers(extra),
            body,
        });
        const text = await response.text();
        let data = null;
        try {
            data = text ? JSON.parse(text) : null;
        }
        catch {
            data = { error: text };
        }
        if (!response.ok)
            throw new ApiError(response.status, data);
        return data;
    }
    /** Sends a turn: it runs on the host, or goes to the turns queue (202 either way). */
    acceptTurn(turn) {
        return this.call("POST", "/turns", { json: turn });
    }
    /** Asks the person's turn to stop (`user_stop`, or `superseded`). */
    stopTurn(turnId, session, reason) {
        return this.call("POST", `/turns/${encodeURIComponent(turnId)}/stop`, {
            query: { session },
            json: reason === undefined ? {} : { reason },
        });
    }
    /** The tab's answer to a UI action the turn asked for. */
    answerAction(turnId, callId, session, answer) {
        return this.call("POST", `/turns/${encodeURIComponent(turnId)}/actions/${encodeURIComponent(callId)}`, {
            query: { session },
            json: answer,
        });
    }
    /** The person's conversations, most recent first. */
    listConversations(page = {}) {
        return this.call("GET", "/conversations", { query: page });
    }
    /** One conversation in display form: its newest messages before `before`. */
    getConversation(id, page = {}) {
        return this.call("GET", `/conversations/${encodeURIComponent(id)}`, { query: page });
    }
    /** Deletes a conversation with its files. */
    deleteConversation(id) {
        return this.call("DELETE", `/conversations/${encodeURIComponent(id)}`);
    }
    /** Keeps a file the person attaches: its reference, for a turn's `attachments`. */
    uploadFile(conversation, file, name) {
        return this.call("POST", `/conversations/${encodeURIComponent(conversation)}/files`, {
            query: { name },
            body: file,
            contentType: file.type || "application/octet-stream",
        });
    }
    /** Steers the running turn, adds a follow-up, or aborts it. */
    async sendCommand(session, command) {
        try {
            return await this.call("POST", `/sessions/${encodeURIComponent(session)}/commands`, { json: command });
        }
        catch (e) {
            // A refused command answers in its own shape: it is the answer, not a failure of the call.
            if (e instanceof ApiError && e.body?.ok === false)
                return e.body;
            throw e;
        }
    }
    /** Whether the conversation runs a turn. */
    sessionState(session) {
        return this.call("GET", `/sessions/${encodeURIComponent(session)}/state`);
    }
    /** The conversation's durable history from `since`. */
    sessionEntries(session, page = {}) {
        return this.call("GET", `/sessions/${encodeURIComponent(session)}/entries`, { query: page });
    }
    /** The host's health. */
    health() {
        return this.call("GET", "/health");
    }
    /**
     * A turn's events, from its log, to its terminal (`completed` or `failed`), which ends the
     * iteration. A stream that drops is opened again after the last event given (`Last-Event-ID`),
     * up to `retries` times in a row: no event is lost or given twice.
     */
    async *events(turnId, options) {
        let last = options.after;
        const retries = options.retries ?? 5;
        let failures = 0;
        for (;;) {
            try {
                const extra = { accept: "text/event-stream" };
                if (last !== undefined)
                    extra["last-event-id"] = String(last);
                const response = await this.fetcher(this.url(`/turns/${encodeURIComponent(turnId)}/events`, { session: options.session }), { headers: await this.headers(extra), signal: options.signal });
                if (!response.ok) {
                    const text = await response.text();
                    let data = { error: text };
                    try {
                        data = JSON.parse(text);
                    }
                    catch {
                        // Not JSON: kept as the error's text.
                    }
                    throw new ApiError(response.status, data);
                }
                if (!response.body)
                    throw new Error("the event stream has no body");
                for await (const message of sseMessages(response.body)) {
                    if (message.event === "stream_ended")
                        throw new TurnNotStarted(turnId);
                    if (message.id === undefined)
                        continue;
                    const id = Number(message.id);
                    let event;
                    try {
                        event = JSON.parse(message.data);
                    }
                    catch {
                        throw new MalformedEvent(message.id, message.data);
                    }
                    last = id;
                    failures = 0;
                    yield { id, event };
                    if (TERMINALS.has(event.type))
                        return;
                }
                throw new Error(`the event stream of turn ${turnId} ended before its terminal`);
            }
            catch (e) {
                const atCap = e instanceof ApiError && (e.status === 429 || e.status === 503);
                if ((e instanceof ApiError && !atCap) || e instanceof TurnNotStarted || e instanceof MalformedEvent)
                    throw e;
                if (options.signal?.aborted || failures >= retries)
                    throw e;
            }
            // The stream dropped before the terminal: open it again after the last event given.
            const wait = Math.min((options.retryDelayMs ?? 250) * 2 ** failures, options.maxRetryDelayMs ?? 5000);
            failures += 1;
            await new Promise((resolve) => setTimeout(resolve, wait));
        }
    }
}
/** The messages of an SSE body, as they come (comments, the host's keep-alives, skipped). */
async function* sseMessages(body) {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    // A `\r` that ends a chunk waits for the next: it may be the first half of `\r\n`.
    let held = "";
    try {
        for (;;) {
            const { value, done } = await reader.read();
            if (done)
                return;
            let text = held + decoder.decode(value, { stream: true });
            held = text.endsWith("\r") ? "\r" : "";
            if (held)
                text = text.slice(0, -1);
            buffer += text.replace(/\r\n?/g, "\n");
            let end;
            while ((end = buffer.indexOf("\n\n")) >= 0) {
                const block = buffer.slice(0, end);
                buffer = buffer.slice(end + 2);
                const message = { event: "message", data: "" };
                const data = [];
                for (const line of block.split("\n")) {
                    if (!line || line.startsWith(":"))
                        continue;
                    const colon = line.indexOf(":");
                    const field = colon < 0 ? line : line.slice(0, colon);
                    const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
                    if (field === "id")
                        message.id = text;
                    else if (field === "event")
                        message.event = text;
                    else if (field === "data")
                        data.push(text);
                }
                if (data.length === 0)
                    continue;
                message.data = data.join("\n");
                yield message;
            }
        }
    }
    finally {
        // Done with it (a terminal, or the caller stopped): the connection is closed.
        await reader.cancel().catch(() => undefined);
    }
}
