#!/usr/bin/env bash
# One turn end to end: the Bedrock stand-in (scripted to use a tool) and `agent-worker invoke`.
# With BEDROCK=aws the same turn runs on real Bedrock, with your AWS credentials.
set -euo pipefail
cd "$(dirname "$0")/.."

bin="${CARGO_TARGET_DIR:-target}/debug/agent-worker"
port="${DEMO_STAND_IN_PORT:-4010}"
args=(invoke --session "demo-$$" --text "What time is it?" --tool current_time
      --system "You are a helpful assistant. Use tools when they help.")

if [[ "${BEDROCK:-stand-in}" == "aws" ]]; then
  unset AWS_EC2_METADATA_DISABLED
  echo "== One turn on Amazon Bedrock (${MODEL_ID:-default model})"
  exec "$bin" "${args[@]}"
fi

export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-stand-in}" AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-stand-in}"
log="$(mktemp)"
"$bin" stand-in --port "$port" --fallback echo 2>"$log" &
stand_in=$!
trap 'kill "$stand_in" 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 1 100); do
  grep -q listening "$log" && break
  kill -0 "$stand_in" 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.05
done
echo "== Bedrock stand-in on http://127.0.0.1:$port"
echo "== agent-worker ${args[*]}"
"$bin" "${args[@]}" --endpoint-url "http://127.0.0.1:$port"
echo "== The turn completed: every event above is one JSON line of the Agent Handler stream."
