#!/usr/bin/env bash
# The main job on local defaults, no AWS account: moto's server (DynamoDB + SQS) and the Bedrock
# stand-in (scripted to use a tool) start, or are reused when already running; the table and a
# FIFO queue are created; a turn is sent through SQS and run by the real handler; its streamed
# events print, then the stored session and the person's list of conversations. With BEDROCK=aws the model is real Bedrock (your
# credentials, MODEL_ID).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/local-env.sh
trap stop_local EXIT

start_moto
start_model

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

section "the person's conversations, most recent first, as a chat UI lists them (agent-worker conversations list)"
"$bin" conversations list --user local-user --account local-account

section "the conversation as a chat UI shows it (agent-worker conversations get)"
"$bin" conversations get demo-conversation --user local-user --account local-account

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
