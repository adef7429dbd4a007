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
