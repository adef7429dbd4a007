#!/usr/bin/env bash
# The main job on local defaults, no AWS account: moto's server (DynamoDB + SQS) and the Bedrock
# stand-in (scripted to use a tool) start; the table and a FIFO queue are created; a turn is
# sent through SQS and run by the real handler; its streamed events print, then the stored
# session. With BEDROCK=aws the model is real Bedrock (your credentials, MODEL_ID).
set -euo pipefail
cd "$(dirname "$0")/.."

bin="${CARGO_TARGET_DIR:-target}/debug/agent-worker"
moto_port="${DEMO_MOTO_PORT:-5010}"
stand_in_port="${DEMO_STAND_IN_PORT:-4010}"
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT

wait_for_port() {
  for _ in $(seq 1 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "nothing listened on 127.0.0.1:$1" >&2
  return 1
}

section() { printf '\n== %s\n' "$*"; }

section "moto's server (DynamoDB + SQS) on 127.0.0.1:$moto_port"
.venv/bin/python scripts/moto_server.py -H 127.0.0.1 -p "$moto_port" >/dev/null 2>&1 &
pids+=($!)
wait_for_port "$moto_port"

export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-demo}" AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-demo}"
export AWS_ENDPOINT_URL_DYNAMODB="http://127.0.0.1:$moto_port" AWS_ENDPOINT_URL_SQS="http://127.0.0.1:$moto_port"
export TABLE_NAME=agent-worker-demo TOOLS=current_time EVENT_SINKS=stdout,dynamo
export SYSTEM_PROMPT="You are a helpful assistant. Use tools when they help."

if [[ "${BEDROCK:-stand-in}" == "aws" ]]; then
  unset AWS_EC2_METADATA_DISABLED
  section "Amazon Bedrock, model ${MODEL_ID:-(the default)}"
else
  section "the Bedrock stand-in on 127.0.0.1:$stand_in_port (it calls the first tool offered, then reports)"
  "$bin" stand-in --port "$stand_in_port" --fallback echo 2>/dev/null &
  pids+=($!)
  wait_for_port "$stand_in_port"
  export AWS_ENDPOINT_URL_BEDROCK_RUNTIME="http://127.0.0.1:$stand_in_port"
fi

section "agent-worker setup --queue agent-worker-demo"
setup="$("$bin" setup --table "$TABLE_NAME" --queue agent-worker-demo)"
echo "$setup"
queue_url="$(python3 -c 'import json,sys; print(json.load(sys.stdin)["queueUrl"])' <<<"$setup")"

section "agent-worker send: one turn into the queue"
"$bin" send --queue-url "$queue_url" --session demo-conversation --turn-id demo-turn-1 --text "What time is it?"

section "agent-worker poll --until-empty: the handler runs the turn; its events stream as JSON lines"
"$bin" poll --queue-url "$queue_url" --until-empty

section "the stored session (agent-worker history)"
"$bin" history --session demo-conversation

section "the turn's event log, read back from DynamoDB (agent-worker events)"
"$bin" events --session demo-conversation --turn-id demo-turn-1

section "the same turn delivered again (agent-worker handle events/one-turn.json-style batch): nothing runs twice"
redelivery="$(mktemp)"
python3 - "$redelivery" <<'PY'
import json, sys
body = json.dumps({"turnId": "demo-turn-1", "conversationId": "demo-conversation", "userId": "local-user",
                   "accountId": "local-account", "content": "What time is it?"})
record = {"messageId": "redelivered-1", "receiptHandle": "r", "body": body, "attributes": {}, "messageAttributes": {},
          "eventSource": "aws:sqs", "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:agent-worker-demo.fifo"}
json.dump({"Records": [record]}, open(sys.argv[1], "w"))
PY
"$bin" handle "$redelivery"
rm -f "$redelivery"
echo "(empty batchItemFailures: acknowledged; the history above is unchanged)"
"$bin" history --session demo-conversation | wc -l | xargs echo "messages stored:"
