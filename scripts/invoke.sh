#!/usr/bin/env bash
# `make invoke`: sends events/one-turn.json to the function `make watch` runs, as a new turn of
# its conversation (a fresh turn id each time; TURN_ID=... repeats one, which runs only once),
# prints the batch response, then the conversation as stored.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/local-env.sh

turn_id="${TURN_ID:-turn-$(date +%s%N)}"
text="${TEXT:-What time is it?}"
event="$(mktemp)"
trap 'rm -f "$event"' EXIT
python3 - events/one-turn.json "$event" "$turn_id" "$text" <<'PY'
import json, sys
source, target, turn_id, text = sys.argv[1:]
event = json.load(open(source))
record = event["Records"][0]
body = json.loads(record["body"])
body["turnId"], body["content"] = turn_id, text
record["body"] = json.dumps(body)
record["messageId"] = f"message-{turn_id}"
record["attributes"]["MessageDeduplicationId"] = turn_id
json.dump(event, open(target, "w"))
print(f"turn {turn_id} of conversation {body['conversationId']}: {text!r}")
PY

section "the batch response"
if ! response="$(timeout "${INVOKE_TIMEOUT:-300}" cargo lambda invoke bootstrap \
  --invoke-address 127.0.0.1 --invoke-port "${WATCH_PORT:-9000}" --data-file "$event")"; then
  echo "no answer from the function: is \`make watch\` running (its terminal says why)?" >&2
  exit 1
fi
echo "$response"

session="$(python3 -c 'import json,sys; print(json.loads(json.load(open(sys.argv[1]))["Records"][0]["body"])["conversationId"])' events/one-turn.json)"
section "the conversation $session as stored (agent-worker history)"
"$bin" history --session "$session"
