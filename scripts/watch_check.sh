#!/usr/bin/env bash
# `make watch-check`: the local loop as docs/configuration.md ("Run it locally") gives it, checked. `make watch` starts in the
# background; two `make invoke`s each run a turn of one conversation; the second continues the
# first (four messages stored); then everything the watch started stops.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/local-env.sh

log=.local/watch-check.log
mkdir -p .local
setsid scripts/watch.sh >"$log" 2>&1 &
watch_pid=$!
trap 'kill -- -"$watch_pid" 2>/dev/null || true; wait "$watch_pid" 2>/dev/null || true' EXIT
wait_port() {
  for _ in $(seq 1 1200); do
    port_open "$1" && return 0
    kill -0 "$watch_pid" 2>/dev/null || { cat "$log"; echo "make watch stopped" >&2; return 1; }
    sleep 0.1
  done
  cat "$log"; echo "make watch did not listen on $1" >&2; return 1
}
wait_port "${WATCH_PORT:-9000}"

session="$(python3 -c 'import json,sys; print(json.loads(json.load(open(sys.argv[1]))["Records"][0]["body"])["conversationId"])' events/one-turn.json)"
count() { "$bin" history --session "$session" | wc -l; }
before="$(count)"
stored=("$before")
for n in 1 2; do
  out="$(scripts/invoke.sh)" || { cat "$log"; exit 1; }
  echo "$out"
  grep -q '"batchItemFailures":\[\]' <<<"$out" || { cat "$log"; echo "invoke $n: the turn was not acknowledged" >&2; exit 1; }
  stored+=("$(count)")
done
first=$((stored[1] - stored[0])) second=$((stored[2] - stored[1]))
if (( first <= 0 || second != first )); then
  cat "$log"
  echo "expected two whole turns in $session, one after the other: ${stored[*]} messages" >&2
  exit 1
fi
echo "watch-check: two turns through cargo lambda watch; $session went from ${stored[0]} to ${stored[2]} messages"

# The HTTP API through cargo lambda's Function URL: a turn taken and queued, the queue's worker
# running it, its events streamed back through the function.
api="http://127.0.0.1:${WATCH_PORT:-9000}/lambda-url/api"
key="${AGENT_WORKER_API_KEY:-local-api-key-0123456789}"
queue_url="$("$bin" setup --table "$TABLE_NAME" --queue "${WATCH_QUEUE:-agent-worker-watch}" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["queueUrl"])')"
api_turn="api-turn-$(date +%s%N)"
accepted="$(curl -sS --max-time 300 -X POST "$api/turns" -H "x-api-key: $key" -H 'content-type: application/json' \
  -d "{\"turnId\":\"$api_turn\",\"conversationId\":\"api-$api_turn\",\"userId\":\"local-user\",\"accountId\":\"local-account\",\"content\":\"What time is it?\"}")" \
  || { cat "$log"; exit 1; }
echo "$accepted"
grep -q '"queued":true' <<<"$accepted" || { cat "$log"; echo "the api function did not queue the turn" >&2; exit 1; }
"$bin" poll --queue-url "$queue_url" --until-empty >/dev/null
events="$(curl -sS --max-time 120 "$api/turns/$api_turn/events?session=api-$api_turn&userId=local-user&accountId=local-account" -H "x-api-key: $key")" \
  || { cat "$log"; exit 1; }
grep -q '"type":"completed"' <<<"$events" || { cat "$log"; echo "$events"; echo "the turn's events did not come back through the api function" >&2; exit 1; }
echo "watch-check: a turn through the api function's URL, queued, run by the poller, its events streamed back"
