// The console in a real browser: headless Chromium (Debian's package) driven by playwright-core
// against `agent-worker serve --console` on moto and the Bedrock stand-in, which answers from
// the script scripts/browser_test.sh writes. Run by `make test-browser`; screenshots go to
// $ARTIFACTS.
"use strict";

const { test, before, after } = require("node:test");
const assert = require("node:assert/strict");
const path = require("node:path");
const { chromium } = require("playwright-core");

const url = process.env.CONSOLE_URL;
const artifacts = process.env.ARTIFACTS;
let browser;
let page;
// What the page asked of the host: each request's address, kind (document, script, fetch) and
// headers.
const requests = [];

const shot = (name) => page.screenshot({ path: path.join(artifacts, `${name}.png`), fullPage: false });
const assistants = () => page.locator(".message.assistant");
const lastAssistant = () => assistants().last();

async function send(text) {
  await page.fill("#input", text);
  await page.press("#input", "Enter");
}

/// Waits until the newest turn has ended, and says how.
async function ended() {
  await page.waitForSelector(".message.assistant:last-of-type[data-ended]", { timeout: 20000 });
  return lastAssistant().getAttribute("data-ended");
}

before(async () => {
  assert.ok(url, "CONSOLE_URL is set by scripts/browser_test.sh");
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  // Reduced motion: no transition is half-way when a screenshot is taken.
  page = await browser.newPage({ viewport: { width: 1280, height: 800 }, reducedMotion: "reduce" });
  page.on("pageerror", (e) => { throw e; });
  page.on("request", (r) => requests.push({ url: new URL(r.url()), kind: r.resourceType(), headers: r.headers() }));
  await page.goto(url);
  await page.waitForSelector("body[data-ready='true']");
});

after(async () => {
  await browser?.close();
});

test("the token opens the page and leaves the address bar", async () => {
  assert.ok(!page.url().includes("token="), page.url());
  assert.equal(await page.textContent("#person"), "console-user · console");
});

test("a turn streams its words before it ends", async () => {
  await send("Hello");
  // Part of the answer is on the page while the turn still runs.
  await page.waitForFunction(() => {
    const last = [...document.querySelectorAll(".message.assistant")].pop();
    return last && last.querySelector(".text").textContent.length > 0 && !last.dataset.ended;
  }, null, { timeout: 20000 });
  assert.equal(await ended(), "completed");
  assert.match(await lastAssistant().locator(".text").textContent(), /I can work with your task list/);
  await shot("1-streamed");
});

test("the page calls the host through the typed client, the token in a header", async () => {
  // The client (clients/typescript, built) is the page's module; the turn's stream came through
  // it: the console's token in its header, never in an address, as for every call to the host.
  assert.ok(requests.some((r) => r.url.pathname === "/client.js"), "the page loaded /client.js");
  const streams = requests.filter((r) => /^\/turns\/[^/]+\/events$/.test(r.url.pathname));
  assert.ok(streams.length > 0, "the turn's events were asked for");
  // Every call the page made, an EventSource's included (were the page to stream with one).
  const calls = requests.filter((r) => r.kind === "fetch" || r.kind === "eventsource");
  assert.ok(calls.length > 3, "the page called the host");
  for (const call of calls) {
    assert.ok(!call.url.search.includes("token"), `${call.url.pathname} carries a token in its address`);
    assert.ok(call.headers["x-console-token"], `${call.url.pathname} carries no x-console-token`);
  }
});

test("the model adds a task to the page through its UI action", async () => {
  await send("Add a task to buy milk");
  await page.waitForSelector(".task[data-id='task-1']", { timeout: 20000 });
  assert.equal(await ended(), "completed");
  assert.equal(await page.textContent(".task[data-id='task-1'] span"), "Buy milk");
  assert.equal(await lastAssistant().locator(".tool").getAttribute("data-status"), "ok");
  assert.match(await lastAssistant().locator(".text").textContent(), /added/);
  await shot("2-added");
});

test("deleting waits for the person's click, and the click deletes", async () => {
  await send("Delete the milk task");
  await page.waitForSelector(".message.assistant:last-of-type .card", { timeout: 20000 });
  assert.equal(await ended(), "completed");
  assert.match(await page.textContent(".card h3"), /Delete a task/);
  assert.equal(await page.locator(".task[data-id='task-1']").count(), 1, "nothing ran before the click");
  assert.equal(await lastAssistant().locator(".tool").getAttribute("data-status"), "waiting");
  await shot("3-approval-card");
  await page.click(".card .approve");
  await page.waitForSelector(".task[data-id='task-1']", { state: "detached", timeout: 20000 });
  assert.equal(await ended(), "completed");
  assert.match(await lastAssistant().locator(".text").textContent(), /Deleted/);
  await shot("4-approved");
});

test("a file the person attaches goes with the message", async () => {
  await page.setInputFiles("#file", { name: "notes.txt", mimeType: "text/plain", buffer: Buffer.from("The launch is on Friday.\n") });
  await page.waitForSelector("#attached .file");
  assert.match(await page.textContent("#attached .file"), /notes\.txt/);
  await send("What does my file say?");
  assert.equal(await ended(), "completed");
  assert.equal(await page.locator("#attached .file").count(), 0, "the file went with the message");
  assert.match(await page.locator(".message.user").last().locator(".file").textContent(), /notes\.txt/);
  assert.match(await lastAssistant().locator(".text").textContent(), /Friday/);
  await shot("5-attached");
});

test("stop mid-turn marks the turn stopped", async () => {
  await send("Tell me a long story");
  await page.waitForFunction(() => {
    const last = [...document.querySelectorAll(".message.assistant")].pop();
    return last && last.querySelector(".text").textContent.length > 0;
  }, null, { timeout: 20000 });
  await page.click("#stop");
  assert.equal(await ended(), "completed");
  await page.waitForSelector(".message.assistant:last-of-type .stopped");
  assert.match(await lastAssistant().locator(".stopped").textContent(), /stopped by you/);
  const told = await lastAssistant().locator(".text").textContent();
  assert.ok(!told.includes("THE END"), "the story was cut off");
  await shot("6-stopped");
});

test("a steer reaches the running turn, and the agent takes it", async () => {
  await send("How far is the lake?");
  await page.waitForFunction(() => {
    const last = [...document.querySelectorAll(".message.assistant")].pop();
    return last && last.querySelector(".text").textContent.length > 0 && !last.dataset.ended;
  }, null, { timeout: 20000 });
  await page.fill("#input", "Use metric units");
  assert.ok(await page.isVisible("#steer"), "a running turn offers the steer");
  await page.click("#steer");
  await page.waitForSelector(".message.user.steer[data-delivered='steer']", { timeout: 20000 });
  assert.equal(await ended(), "completed");
  assert.match(await lastAssistant().locator(".text").textContent(), /five kilometres/);
  await shot("6b-steered");
});

test("reloading the page restores the conversation", async () => {
  await page.reload();
  await page.waitForSelector("body[data-ready='true']");
  await page.waitForSelector(".message.user");
  const said = await page.locator(".message.user .text").allTextContents();
  assert.deepEqual(said, ["Hello", "Add a task to buy milk", "Delete the milk task", "What does my file say?",
    "Tell me a long story", "How far is the lake?", "Use metric units"]);
  assert.match(await page.locator(".message.user .file").first().textContent(), /notes\.txt/, "the file's reference is kept");
  assert.ok((await page.locator(".message .stopped").count()) >= 1, "the stopped marker is kept");
  assert.ok((await page.locator(".conversation[aria-current='true']").count()) === 1, "the conversation is listed");
  await shot("7-reloaded");
  await page.setViewportSize({ width: 390, height: 800 });
  await shot("8-narrow");
});
