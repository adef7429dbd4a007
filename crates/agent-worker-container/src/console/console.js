// The agent-worker console: the person's tab. It talks to the container host's own routes with
// the per-start token through the typed client (clients/typescript, served as /client.js),
// follows each turn's events (resumed after a drop), shows approval cards, and answers the UI
// actions of its task list (its `oui` surface) itself.
import { AgentWorkerClient } from "/client.js";

const $ = (id) => document.getElementById(id);
const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (value !== undefined && value !== null) node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child);
  }
  return node;
};
const newId = (prefix) => `${prefix}-${crypto.randomUUID().replaceAll("-", "").slice(0, 16)}`;

// ---- The token and the person -------------------------------------------------------------
const params = new URLSearchParams(location.search);
if (params.get("token")) {
  sessionStorage.setItem("console-token", params.get("token"));
  history.replaceState(null, "", location.pathname);
}
const token = sessionStorage.getItem("console-token") || "";
const person = { userId: "", accountId: "" };

// The console's token stands for its own person: every call is theirs.
const client = new AgentWorkerClient({ consoleToken: token });

// ---- State ---------------------------------------------------------------------------------
const state = {
  conversation: localStorage.getItem("console-conversation") || newId("c"),
  turn: null,          // the running turn: { id, stream (its AbortController), view }
  acceptedTurn: null,  // the one turn whose UI action requests this tab takes
  voice: null,         // { language } while the composed message was spoken
  attached: [],        // the references of the files attached to the next message
};

// ---- The task list: the page's own surface ---------------------------------------------------
const tasksKey = () => `console-tasks:${state.conversation}`;
let tasks = [];
let nextTask = 1;
function loadTasks() {
  const saved = JSON.parse(localStorage.getItem(tasksKey()) || "null");
  tasks = saved ? saved.tasks : [];
  nextTask = saved ? saved.next : 1;
  renderTasks();
}
function saveTasks() {
  localStorage.setItem(tasksKey(), JSON.stringify({ tasks, next: nextTask }));
  renderTasks();
}
function renderTasks(flash) {
  const list = $("tasks");
  list.replaceChildren(...tasks.map((task) => el("li",
    { class: `task${task.done ? " done" : ""}${task.id === flash ? " flash" : ""}`, "data-id": task.id },
    el("input", { type: "checkbox", "aria-label": `Complete ${task.title}`, ...(task.done ? { checked: "" } : {}),
      onchange: () => { task.done = !task.done; saveTasks(); } }),
    el("span", {}, task.title),
    el("span", { class: "id" }, task.id),
    el("button", { type: "button", title: "Delete", "aria-label": `Delete ${task.title}`,
      onclick: () => { tasks = tasks.filter((t) => t !== task); saveTasks(); } }, "×"))));
  $("no-tasks").hidden = tasks.length > 0;
}
function addTask(title) {
  const task = { id: `task-${nextTask++}`, title, done: false };
  tasks.push(task);
  saveTasks();
  renderTasks(task.id);
  return task;
}

// The surface snapshot sent with every turn: the turn's UI tools are made from it.
const snapshot = () => ({
  surfaces: [{
    id: "tasks",
    title: "Task list",
    actions: [
      { id: "add", title: "Add a task", description: "Adds a task to the person's task list.",
        input: { type: "object", properties: { title: { type: "string", title: "Title" } }, required: ["title"] } },
      { id: "complete", title: "Complete a task", description: "Marks a task of the list as done.",
        input: { type: "object", properties: { id: { type: "string", title: "Task id" } }, required: ["id"] } },
      { id: "delete", title: "Delete a task", description: "Deletes a task from the list.", confirm: true,
        consequence: "The task is removed from the list for good.",
        input: { type: "object", properties: { id: { type: "string", title: "Task id" } }, required: ["id"] } },
    ],
  }],
});

// Runs one action of the surface; the result goes back to the model.
function runAction(action, args, approval) {
  const find = () => tasks.find((t) => t.id === args.id);
  switch (action) {
    case "add": {
      const task = addTask(String(args.title || "").trim() || "Untitled");
      return { ok: true, result: { id: task.id, title: task.title } };
    }
    case "complete": {
      const task = find();
      if (!task) return { ok: false, result: { error: `there is no task ${args.id}` } };
      task.done = true;
      saveTasks();
      return { ok: true, result: { id: task.id, done: true } };
    }
    case "delete": {
      // A destructive action runs only on the grant of the person's own click.
      if (!approval) return { refused: "deleting needs the person's approval" };
      const task = find();
      if (!task) return { ok: false, result: { error: `there is no task ${args.id}` } };
      tasks = tasks.filter((t) => t !== task);
      saveTasks();
      return { ok: true, result: { deleted: task.id } };
    }
    default:
      return { refused: `this page has no action ${action}` };
  }
}

async function answerAction(request) {
  const answer = (body) => client.answerAction(request.turnId, request.callId, state.conversation, body);
  // A request of a turn that is no longer the current one is refused, never run.
  if (request.turnId !== state.acceptedTurn) {
    await answer({ status: "refused", reason: `turn ${request.turnId} is not the current turn` });
    return;
  }
  await answer({ status: "taken" });
  const done = request.surface === "tasks"
    ? runAction(request.action, request.args || {}, request.approval)
    : { refused: `this page has no surface ${request.surface}` };
  const body = done.refused
    ? { status: "refused", reason: done.refused }
    : { status: "done", result: done.result, isError: !done.ok };
  await answer(body);
}

// ---- Files the person attaches ------------------------------------------------------------------
const sizeOf = (bytes) => bytes < 1024 ? `${bytes} B` : bytes < 1048576 ? `${(bytes / 1024).toFixed(1)} KB` : `${(bytes / 1048576).toFixed(1)} MB`;
const fileChip = (ref, onRemove) => el("span", { class: "file", "data-file": ref.id },
  el("span", {}, ref.name), el("span", { class: "usage" }, sizeOf(ref.size)),
  onRemove ? el("button", { type: "button", "aria-label": `Remove ${ref.name}`, onclick: onRemove }, "×") : null);

function renderAttached() {
  const box = $("attached");
  box.hidden = state.attached.length === 0;
  box.replaceChildren(...state.attached.map((ref) => fileChip(ref, () => {
    state.attached = state.attached.filter((r) => r !== ref);
    renderAttached();
  })));
}

async function attach(file) {
  state.attached.push(await client.uploadFile(state.conversation, file, file.name));
  renderAttached();
}

// ---- Rendering messages ---------------------------------------------------------------------
const messages = $("messages");
const scrollDown = () => { messages.scrollTop = messages.scrollHeight; };

function messageView(role) {
  const text = el("div", { class: "text" });
  const node = el("div", { class: `message ${role}`, "data-role": role },
    el("div", { class: "who" }, role === "user" ? "You" : "Agent"), text);
  messages.append(node);
  return { node, text };
}
function toolChip(name, status, id) {
  return el("div", { class: "tool", "data-status": status, "data-call": id || "" },
    el("span", { class: "dot" }), el("code", {}, name), el("span", { class: "state" }, status));
}
function setToolStatus(view, id, isError, content) {
  const chip = view.node.querySelector(`.tool[data-call="${CSS.escape(id)}"]`);
  if (!chip) return;
  const waiting = content && content.status === "waiting_for_approval";
  const status = isError ? "error" : waiting ? "waiting" : "ok";
  chip.dataset.status = status;
  chip.querySelector(".state").textContent = status;
}
function stoppedLine(reason) {
  const why = { user_stop: "stopped by you", superseded: "replaced by your next message", deadline: "out of time" };
  return el("div", { class: "stopped" }, `■ Turn ${why[reason] || reason}`);
}

function approvalCard(card, turnId) {
  const preview = card.preview || {};
  const fields = (preview.fields || []).flatMap((f) => [el("dt", {}, f.title || f.name), el("dd", {}, String(f.value ?? ""))]);
  const node = el("div", { class: "card", "data-approval": card.approvalId },
    el("h3", {}, `Approve: ${preview.title || card.tool}`),
    preview.consequence ? el("p", {}, preview.consequence) : null,
    fields.length ? el("dl", {}, ...fields) : null);
  const decide = (decision) => async () => {
    let token = card.token;
    if (!token && decision === "approve") token = await tokenFromLog(turnId, card.approvalId);
    node.dataset.settled = decision;
    node.append(el("div", { class: "note" }, decision === "approve" ? "Approved." : "Declined."));
    const approval = decision === "approve"
      ? { approvalId: card.approvalId, decision, token }
      : { approvalId: card.approvalId, decision };
    send("", approval);
  };
  node.append(el("div", { class: "actions" },
    el("button", { class: "approve", type: "button", onclick: decide("approve") }, "Approve"),
    el("button", { class: "decline", type: "button", onclick: decide("decline") }, "Decline")));
  return node;
}

// A card shown from the stored conversation has no token: it is in the turn's event log.
async function tokenFromLog(turnId, approvalId) {
  try {
    for await (const { event } of client.events(turnId, { session: state.conversation })) {
      if (event.type === "approval_required" && event.approvalId === approvalId) return event.token;
    }
  } catch (e) {
    console.warn("could not read the turn's events", e);
  }
  return undefined;
}

// ---- Conversations --------------------------------------------------------------------------
async function refreshList() {
  let page = { conversations: [] };
  try { page = await client.listConversations({ limit: 50 }); } catch (e) { console.warn(e); }
  const list = page.conversations || [];
  $("conversations").replaceChildren(...list.map((c) => el("button",
    { class: "conversation", type: "button", "aria-current": String(c.id === state.conversation), "data-id": c.id,
      onclick: () => openConversation(c.id) },
    el("span", { class: "name" }, c.title || "Untitled"),
    el("span", { class: "preview" }, c.preview || ""),
    c.running ? el("span", { class: "running" }, "● running") : null)));
  const current = list.find((c) => c.id === state.conversation);
  $("title").textContent = current ? current.title : "New conversation";
}

async function openConversation(id) {
  if (state.turn) state.turn.stream.abort();
  state.turn = null;
  setRunning(false);
  state.conversation = id;
  localStorage.setItem("console-conversation", id);
  document.getElementById("app").classList.remove("menu-open");
  messages.replaceChildren();
  loadTasks();
  await refreshList();
  let view = null;
  try { view = await client.getConversation(id, { limit: 100 }); } catch { view = null; }
  if (!view) return;
  let turnView = null;
  for (const message of view.messages) {
    if (message.role === "user") {
      // A decision on an approval is stored as the worker's <approval> block, not as words.
      const decided = /^<approval [^>]*outcome="([a-z_]+)"/.exec(message.text || "");
      if (decided) messages.append(el("div", { class: "message note" }, `Your decision: ${decided[1].replaceAll("_", " ")}`));
      else if (message.text || (message.attachments || []).length) {
        const view = messageView("user");
        view.text.textContent = message.text;
        if ((message.attachments || []).length) view.node.append(el("div", { class: "files" }, ...message.attachments.map((ref) => fileChip(ref))));
      }
      turnView = null;
      continue;
    }
    turnView = turnView || messageView("assistant");
    if (message.text) turnView.text.textContent += (turnView.text.textContent ? "\n\n" : "") + message.text;
    for (const call of message.toolCalls || []) turnView.node.append(toolChip(call.name, call.status, call.id));
    if (message.stopped) turnView.node.append(stoppedLine(message.stopped.reason));
  }
  for (const card of view.approvals || []) {
    (turnView || messageView("assistant")).node.append(approvalCard(card, card.turnId));
  }
  scrollDown();
}

// ---- A turn ---------------------------------------------------------------------------------
function setRunning(running) {
  $("send").hidden = running && !$("input").value.trim();
  $("steer").hidden = !running || !$("input").value.trim();
  $("stop").hidden = !running;
  const status = $("status");
  status.dataset.state = running ? "running" : "idle";
  status.textContent = running ? "running" : "ready";
}

async function send(text, approval) {
  const session = state.conversation;
  const supersedes = [];
  if (state.turn) {
    // A message sent while a turn runs replaces it (a barge-in).
    const running = state.turn;
    supersedes.push(running.id);
    running.stream.abort();
    running.view.node.append(stoppedLine("superseded"));
    await client.stopTurn(running.id, session, "superseded").catch(() => {});
  }
  const turnId = newId("t");
  const context = {
    oui: snapshot(),
    timeZone: Intl.DateTimeFormat().resolvedOptions().timeZone,
    tasks: tasks.map(({ id, title, done }) => ({ id, title, done })),
  };
  if (state.voice && !approval) context.input = { mode: "voice", language: state.voice.language };
  state.voice = null;
  const payload = { turnId, conversationId: session, userId: person.userId, accountId: person.accountId, content: text, context };
  if (approval) payload.approval = approval;
  if (supersedes.length) payload.supersedes = supersedes;
  const attachments = approval ? [] : state.attached;
  if (attachments.length) payload.attachments = attachments;
  if (!approval) state.attached = [];
  renderAttached();
  if (text || attachments.length) {
    const mine = messageView("user");
    mine.text.textContent = text;
    if (attachments.length) mine.node.append(el("div", { class: "files" }, ...attachments.map((ref) => fileChip(ref))));
  }
  const view = messageView("assistant");
  view.node.dataset.turn = turnId;
  scrollDown();
  state.acceptedTurn = turnId;
  try {
    await client.acceptTurn(payload);
  } catch (e) {
    view.node.append(el("div", { class: "note failed" }, `Not sent: ${e.message}`));
    return;
  }
  follow(turnId, session, view);
  refreshList();
}

function follow(turnId, session, firstView) {
  // The turn's words go to its newest view: a steer the turn takes starts a new one after it.
  let view = firstView;
  const stream = new AbortController();
  state.turn = { id: turnId, stream, view };
  setRunning(true);
  let thinking = null;
  const handle = (event) => {
    switch (event.type) {
      case "text":
        view.text.textContent += event.delta;
        break;
      case "thinking":
        if (!thinking) {
          thinking = el("div");
          view.node.insertBefore(el("details", { class: "thinking" }, el("summary", {}, "Thinking"), thinking), view.text);
        }
        thinking.textContent += event.delta;
        break;
      case "tool_started":
        view.node.append(toolChip(event.name, "running", event.id));
        break;
      case "tool_ended":
        setToolStatus(view, event.id, event.isError, event.content);
        break;
      case "retrying":
        view.node.append(el("div", { class: "note retry" }, `Retrying (${event.reason || "the model failed"})…`));
        break;
      case "usage":
        view.node.querySelector(".usage")?.remove();
        view.node.append(el("div", { class: "usage" }, `${event.inputTokens} in · ${event.outputTokens} out`));
        break;
      case "approval_required":
        view.node.append(approvalCard(event, turnId));
        break;
      case "ui_action_requested":
        answerAction(event).catch((e) => console.warn("could not answer the action", e));
        break;
      case "command_delivered": {
        const steer = messages.querySelector(".message.user.steer:not([data-delivered])");
        if (steer) steer.dataset.delivered = event.kind;
        view = messageView("assistant");
        view.node.dataset.turn = turnId;
        break;
      }
      case "completed":
      case "failed":
      case "cancelled":
        end(event);
        break;
      default:
        break;
    }
    scrollDown();
  };
  const end = (event) => {
    stream.abort();
    if (state.turn && state.turn.id === turnId) state.turn = null;
    const reason = event.data && event.data.stopReason;
    if (event.type === "failed") view.node.append(el("div", { class: "note failed" }, `Failed: ${event.details || event.code}`));
    else if (["user_stop", "superseded", "deadline"].includes(reason)) view.node.append(stoppedLine(reason));
    view.node.dataset.ended = event.type;
    setRunning(false);
    refreshList();
  };
  (async () => {
    try {
      // Followed for as long as the page is open: a dropped stream is opened again after its
      // last event, however often it drops.
      const following = client.events(turnId, { session, signal: stream.signal, retries: Infinity });
      for await (const { event } of following) handle(event);
    } catch (e) {
      if (stream.signal.aborted) return;
      view.node.append(el("div", { class: "note failed" }, `Lost the turn's events: ${e.message}`));
      if (state.turn && state.turn.id === turnId) state.turn = null;
      setRunning(false);
      refreshList();
    }
  })();
}

// ---- Wiring ---------------------------------------------------------------------------------
$("composer").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = $("input").value.trim();
  if (!text && state.attached.length === 0) return;
  $("input").value = "";
  send(text);
});
$("input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) {
    e.preventDefault();
    $("composer").requestSubmit();
  }
});
$("input").addEventListener("input", () => {
  if (state.turn) {
    $("send").hidden = !$("input").value.trim();
    $("steer").hidden = !$("input").value.trim();
  }
  state.voice = state.voice && $("input").value ? state.voice : null;
});
// A steer goes to the running turn, which gives it to the model at its next step.
$("steer").addEventListener("click", async () => {
  const text = $("input").value.trim();
  if (!state.turn || !text) return;
  $("input").value = "";
  $("steer").hidden = true;
  $("send").hidden = true;
  const mine = messageView("user");
  mine.node.classList.add("steer");
  mine.text.textContent = text;
  scrollDown();
  let answer;
  try {
    answer = await client.sendCommand(state.conversation, { type: "steer", prompt: text });
  } catch (e) {
    answer = { ok: false, error: { message: e.message } };
  }
  if (!answer.ok) mine.node.append(el("div", { class: "note failed" }, `Not taken: ${answer.error.message}`));
});
$("stop").addEventListener("click", async () => {
  if (!state.turn) return;
  await client.stopTurn(state.turn.id, state.conversation, "user_stop").catch(() => {});
  $("status").textContent = "stopping…";
});
$("new-conversation").addEventListener("click", () => openConversation(newId("c")));
$("attach").addEventListener("click", () => $("file").click());
$("file").addEventListener("change", async () => {
  for (const file of $("file").files) {
    try {
      await attach(file);
    } catch (e) {
      $("attached").hidden = false;
      $("attached").append(el("span", { class: "note failed" }, `${file.name}: ${e.message}`));
    }
  }
  $("file").value = "";
});
$("menu").addEventListener("click", () => $("app").classList.toggle("menu-open"));
$("add-task").addEventListener("submit", (e) => {
  e.preventDefault();
  const title = $("task-title").value.trim();
  if (title) addTask(title);
  $("task-title").value = "";
});

// Voice input, where the browser offers speech recognition.
const Recognition = window.SpeechRecognition || window.webkitSpeechRecognition;
if (Recognition) {
  const mic = $("mic");
  mic.hidden = false;
  let listening = null;
  mic.addEventListener("click", () => {
    if (listening) { listening.stop(); return; }
    listening = new Recognition();
    listening.lang = navigator.language;
    listening.onresult = (e) => {
      $("input").value = Array.from(e.results).map((r) => r[0].transcript).join(" ");
      state.voice = { language: listening.lang };
    };
    listening.onend = () => { listening = null; mic.setAttribute("aria-pressed", "false"); };
    listening.start();
    mic.setAttribute("aria-pressed", "true");
  });
}

(async function start() {
  try {
    const answer = await fetch("/console/config", { headers: { "x-console-token": token } });
    if (!answer.ok) throw new Error(`${answer.status}`);
    const config = await answer.json();
    person.userId = config.userId;
    person.accountId = config.accountId;
    $("model").textContent = config.model;
    $("person").textContent = `${config.userId} · ${config.accountId}`;
  } catch (e) {
    $("status").dataset.state = "error";
    $("status").textContent = "open the URL the server printed";
    return;
  }
  await openConversation(state.conversation);
  document.body.dataset.ready = "true";
})();
