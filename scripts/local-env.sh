# Sourced by demo.sh, watch.sh and invoke.sh: the local defaults (moto's server for DynamoDB and
# SQS, the Bedrock stand-in, one table) and the helpers that start or reuse them. Nothing here
# reaches AWS unless BEDROCK=aws, and then only Bedrock.

bin="${CARGO_TARGET_DIR:-target}/debug/agent-worker"
stand_in="${CARGO_TARGET_DIR:-target}/debug/bedrock-stand-in"
moto_port="${LOCAL_MOTO_PORT:-5010}"
stand_in_port="${LOCAL_STAND_IN_PORT:-4010}"
local_pids=()

export AWS_REGION="${AWS_REGION:-us-east-1}"
export AWS_ENDPOINT_URL_DYNAMODB="http://127.0.0.1:$moto_port" AWS_ENDPOINT_URL_SQS="http://127.0.0.1:$moto_port"
export AWS_ENDPOINT_URL_SECRETS_MANAGER="http://127.0.0.1:$moto_port"
export TABLE_NAME="${TABLE_NAME:-agent-worker-demo}" TOOLS="${TOOLS:-current_time}" EVENT_SINKS="${EVENT_SINKS:-stdout,dynamo}"
export SYSTEM_PROMPT="${SYSTEM_PROMPT:-You are a helpful assistant. Use tools when they help.}"
export MODEL_ID="${MODEL_ID:-us.anthropic.claude-sonnet-4-6}"
if [[ "${BEDROCK:-stand-in}" == "aws" ]]; then
  # Your own credentials reach Bedrock; moto takes any signature, so they serve it too.
  unset AWS_EC2_METADATA_DISABLED
else
  export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-local}" AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-local}"
  export AWS_ENDPOINT_URL_BEDROCK_RUNTIME="http://127.0.0.1:$stand_in_port"
fi

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_for_port() {
  for _ in $(seq 1 200); do
    port_open "$1" && return 0
    sleep 0.05
  done
  echo "nothing listened on 127.0.0.1:$1" >&2
  return 1
}

section() { printf '\n== %s\n' "$*"; }

# Stops what this script started (not what it found running).
stop_local() { for pid in "${local_pids[@]}"; do kill "$pid" 2>/dev/null || true; done; }

# moto's server on $moto_port, started unless one answers there already.
start_moto() {
  if port_open "$moto_port"; then
    section "moto's server (DynamoDB + SQS): reusing 127.0.0.1:$moto_port"
    return
  fi
  section "moto's server (DynamoDB + SQS) on 127.0.0.1:$moto_port"
  .venv/bin/python scripts/moto_server.py -H 127.0.0.1 -p "$moto_port" >/dev/null 2>&1 &
  local_pids+=($!)
  wait_for_port "$moto_port"
}

# The Bedrock stand-in on $stand_in_port (it calls the first tool offered, then reports),
# started unless one answers there already; with BEDROCK=aws, real Bedrock instead.
start_model() {
  if [[ "${BEDROCK:-stand-in}" == "aws" ]]; then
    section "Amazon Bedrock, model $MODEL_ID (your credentials)"
    return
  fi
  if port_open "$stand_in_port"; then
    section "the Bedrock stand-in: reusing 127.0.0.1:$stand_in_port"
    return
  fi
  section "the Bedrock stand-in on 127.0.0.1:$stand_in_port (it calls the first tool offered, then reports)"
  "$stand_in" --port "$stand_in_port" --fallback echo 2>/dev/null &
  local_pids+=($!)
  wait_for_port "$stand_in_port"
}
