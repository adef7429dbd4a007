#!/usr/bin/env bash
# The console in a real browser: moto's server, the Bedrock stand-in (answering from a script of
# this test's turns), and `agent-worker serve --console`; then headless Chromium (Debian's
# package, at $CHROMIUM or /usr/bin/chromium) runs tests/browser/console.test.cjs through
# playwright-core. Screenshots go to target/browser-artifacts/. It fails, never skips, without a
# browser.
set -euo pipefail
cd "$(dirname "$0")/.."
export LOCAL_MOTO_PORT="${LOCAL_MOTO_PORT:-5030}" LOCAL_STAND_IN_PORT="${LOCAL_STAND_IN_PORT:-4030}"
export TABLE_NAME="agent-worker-browser-$$" TOOLS="" EVENT_SINKS="dynamo"
source scripts/local-env.sh
trap stop_local EXIT

chromium="${CHROMIUM:-/usr/bin/chromium}"
if [[ ! -x "$chromium" ]]; then
  echo "no Chromium at $chromium: install Debian's chromium package (.ci/run does), or set CHROMIUM" >&2
  exit 1
fi
artifacts="${ARTIFACTS:-target/browser-artifacts}"
mkdir -p "$artifacts"
work="$(mktemp -d)"
local_pids+=()

# The model's answers, in the order the test's turns ask for them.
python3 - "$work/replies.json" <<'PY'
import json, sys

def stream(frames, delay_ms=0, stop="end_turn"):
    frames = [{"event": "messageStart", "payload": {"role": "assistant"}}] + frames + [
        {"event": "messageStop", "payload": {"stopReason": stop}},
        {"event": "metadata", "payload": {"usage": {"inputTokens": 40, "outputTokens": 12, "totalTokens": 52}, "metrics": {"latencyMs": 90}}},
    ]
    return {"kind": "stream", "frames": frames, "chunk_delay_ms": delay_ms, "hang": False}

def text(words, pieces=8, delay_ms=60):
    size = max(1, -(-len(words) // pieces))
    deltas = [{"event": "contentBlockDelta", "payload": {"contentBlockIndex": 0, "delta": {"text": words[i:i + size]}}}
              for i in range(0, len(words), size)]
    return stream(deltas + [{"event": "contentBlockStop", "payload": {"contentBlockIndex": 0}}], delay_ms)

def call(call_id, name, args):
    return stream([
        {"event": "contentBlockStart", "payload": {"contentBlockIndex": 0, "start": {"toolUse": {"toolUseId": call_id, "name": name}}}},
        {"event": "contentBlockDelta", "payload": {"contentBlockIndex": 0, "delta": {"toolUse": {"input": json.dumps(args)}}}},
        {"event": "contentBlockStop", "payload": {"contentBlockIndex": 0}},
    ], stop="tool_use")

story = "Once upon a time there was a task list that grew and grew. " * 12 + "THE END."
replies = [
    text("Hello! I can work with your task list: add, complete or delete tasks.", pieces=16, delay_ms=150),
    call("tooluse_add_1", "ui_tasks_add", {"title": "Buy milk"}),
    text("I added \u201cBuy milk\u201d to your list."),
    call("tooluse_delete_1", "ui_tasks_delete", {"id": "task-1"}),
    text("Deleted it: your list is empty again."),
    text("Your notes say the launch is on Friday."),
    text(story, pieces=60, delay_ms=250),
    text("Let me work out how far the lake is from here, step by step.", pieces=30, delay_ms=200),
    text("Metric it is: the lake is five kilometres away."),
]
json.dump(replies, open(sys.argv[1], "w"))
PY

start_moto
section "the Bedrock stand-in on 127.0.0.1:$stand_in_port, answering the browser test's script"
"$stand_in" --port "$stand_in_port" --script "$work/replies.json" --fallback echo 2>"$work/stand-in.err" &
local_pids+=($!)
wait_for_port "$stand_in_port" || { cat "$work/stand-in.err" >&2; exit 1; }

"$bin" setup --table "$TABLE_NAME" >/dev/null
section "agent-worker serve --console"
# The server's output file exists before the server does: a background command's redirection
# happens in the child, after the fork, and the wait below may read first.
: >"$work/serve.out"
APPROVAL_SECRET="browser-test-approval-key-0123456789abcdef" FILES_DIR="$work/files" \
  "$bin" serve --console --port 0 --api-key "browser-test-api-key-0123456789" >"$work/serve.out" 2>"$work/serve.err" &
local_pids+=($!)
console_url=""
for _ in $(seq 1 400); do
  console_url="$(sed -n 's/^console: //p' "$work/serve.out" | head -n 1)"
  [[ -n "$console_url" ]] && break
  sleep 0.05
done
if [[ -z "$console_url" ]]; then
  cat "$work/serve.err" >&2
  echo "the console did not start" >&2
  exit 1
fi
echo "the console: ${console_url%%\?*} (its token is not printed here)"

section "headless Chromium: tests/browser/console.test.cjs"
CONSOLE_URL="$console_url" ARTIFACTS="$artifacts" CHROMIUM="$chromium" NODE_PATH="$PWD/.node/node_modules" \
  node ${BROWSER_TEST:---test --test-reporter=spec tests/browser/console.test.cjs}
echo "screenshots: $artifacts"
