#!/usr/bin/env bash
# A product's own API as the agent's tools, by configuration alone, on local defaults: moto's
# server, the Bedrock stand-in (it calls the first tool offered, then reports) and the fixture
# help desk's API start; a configuration points at the desk's OpenAPI document; `agent-worker
# tools` shows what it yields; a turn carrying the person's token goes through SQS, and the
# desk's own log shows the call arriving as that person.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/local-env.sh
trap stop_local EXIT
desk="${CARGO_TARGET_DIR:-target}/debug/desk-api"
desk_port="${LOCAL_DESK_PORT:-4011}"
# The persona of the configuration, not the demo's system prompt.
unset SYSTEM_PROMPT
export TOOLS=""

start_moto
start_model

section "the fixture help desk's API on 127.0.0.1:$desk_port (its own log follows each call)"
desk_log="$(mktemp)"
"$desk" --port "$desk_port" >"$desk_log" 2>/dev/null &
local_pids+=($!)
wait_for_port "$desk_port"

config_dir="$(mktemp -d)"
cp examples/config/desk.openapi.json "$config_dir/"
sed "s#baseUrl: https://api.desk.example#baseUrl: http://127.0.0.1:$desk_port#" \
  examples/config/agent-worker.yaml | sed '/^tools:/d' >"$config_dir/agent-worker.yaml"

section "agent-worker tools --config agent-worker.yaml (examples/config, pointed at the local desk)"
"$bin" tools --config "$config_dir/agent-worker.yaml"

section "agent-worker setup --queue agent-worker-tools-demo"
setup="$("$bin" setup --table "$TABLE_NAME" --queue agent-worker-tools-demo)"
queue_url="$(python3 -c 'import json,sys; print(json.load(sys.stdin)["queueUrl"])' <<<"$setup")"

section "agent-worker send: ana's turn, with her token for the desk (userToken)"
"$bin" send --queue-url "$queue_url" --session tools-demo --turn-id tools-demo-1 \
  --user-id ana --account-id acme --user-token desk-token-ana-7d3f9a --text "Which tickets are open?"

section "agent-worker poll --config: the handler runs the turn with the desk's tools"
"$bin" poll --queue-url "$queue_url" --until-empty --config "$config_dir/agent-worker.yaml"

section "what the desk received: the call, as ana (the token itself is never printed or stored)"
cat "$desk_log"
grep -q '"user":"ana"' "$desk_log" || { echo "the desk saw no call as ana" >&2; exit 1; }
rm -rf "$config_dir" "$desk_log"
