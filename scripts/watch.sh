#!/usr/bin/env bash
# `make watch`: the Lambda functions under `cargo lambda watch` (hot reload) on local defaults:
# `bootstrap` (the worker, `make invoke`) and `api` (the HTTP API, a Function URL at
# /lambda-url/api/...).
# moto's server and the Bedrock stand-in start, or are reused when already running (say, from
# `make demo` in another terminal); the table is created; the function gets the environment
# below. Then `make invoke`, in another terminal, sends it a turn. With BEDROCK=aws the model is
# real Bedrock (your credentials, MODEL_ID). Ctrl-C stops the watch and what it started.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/local-env.sh
trap stop_local EXIT

start_moto
start_model

section "the table $TABLE_NAME and the turns queue (agent-worker setup)"
setup="$("$bin" setup --table "$TABLE_NAME" --queue "${WATCH_QUEUE:-agent-worker-watch}")"
# The api function sends the turns it takes here; `agent-worker poll` (or the watch's bootstrap,
# through `make invoke`) runs them.
export TURNS_QUEUE_URL="$(python3 -c 'import json,sys; print(json.load(sys.stdin)["queueUrl"])' <<<"$setup")"
export AGENT_WORKER_API_KEY="${AGENT_WORKER_API_KEY:-local-api-key-0123456789}"

# The function's whole environment: cargo lambda passes it these, and nothing else of ours.
mkdir -p .local
env_file=.local/watch.env
{
  for name in AWS_REGION AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN AWS_PROFILE \
    AWS_ENDPOINT_URL_DYNAMODB AWS_ENDPOINT_URL_SQS AWS_ENDPOINT_URL_SECRETS_MANAGER \
    AWS_ENDPOINT_URL_BEDROCK_RUNTIME AWS_EC2_METADATA_DISABLED \
    TABLE_NAME MODEL_ID TOOLS EVENT_SINKS SYSTEM_PROMPT RUST_LOG \
    TURNS_QUEUE_URL AGENT_WORKER_API_KEY; do
    if [[ -n "${!name:-}" ]]; then
      value="${!name//\\/\\\\}"
      printf '%s="%s"\n' "$name" "${value//\"/\\\"}"
    fi
  done
} >"$env_file"

section "cargo lambda watch on 127.0.0.1:${WATCH_PORT:-9000} (the function's environment: $env_file)"
echo "Send a turn from another terminal: make invoke"
echo "The HTTP API (the api function, turns to $TURNS_QUEUE_URL):"
echo "  curl http://127.0.0.1:${WATCH_PORT:-9000}/lambda-url/api/conversations?userId=local-user\&accountId=local-account -H 'x-api-key: $AGENT_WORKER_API_KEY'"
cargo lambda watch --all-features --invoke-address 127.0.0.1 --invoke-port "${WATCH_PORT:-9000}" \
  --env-file "$env_file"
