#!/usr/bin/env bash
# The A2A TCK's mandatory category (a2aproject/a2a-tck at 410ba92, pinned below) against
# `agent-worker serve` on local defaults: moto's DynamoDB, the Bedrock stand-in (it echoes), and
# people known by their tokens (a key made here, its JWKS served on 127.0.0.1, one token for the
# TCK). Against `serve` (whose workers push, A2A_PUSH=on, to the TCK's webhook on localhost:8888,
# A2A_PUSH_LOOPBACK=true), the optional category's push notification tests run after it, their
# outcome checked against conformance/a2a-tck-push.txt (every one passing).
# The run's per-test outcome is checked against conformance/a2a-tck.txt and the expected
# failures, each with its reason, in conformance/a2a-tck-expected-failures.txt
# (scripts/a2a_tck_outcome.py says how); any other outcome fails.
#
# The TCK is a plain copy at A2A_TCK_DIR (no .git needed; the project keeps one at
# ../shared/conformance/a2a-tck). It is never written to: it is copied to a work folder, checked
# to be the pinned commit's tree, and run there, on the Python packages of
# conformance/a2a-tck-requirements.txt (exact versions, in .tools/a2a-tck-venv: `make test-a2a`
# installs them).
#
# Usage: scripts/a2a_tck.sh
#   UPDATE=1             rewrite conformance/a2a-tck.txt and the expected-failures list from the run
#                        (prints the expected failures that now pass, and the new ones: give each a
#                        reason, `tck: ...` or `ours: ...`)
#   A2A_TCK_SUT=reference  the same tests against a2a-sdk's own server (scripts/a2a_reference_agent.py,
#                        from .venv) instead: conformance/a2a-tck-reference.txt, which shows which
#                        failures are the TCK's own
set -euo pipefail
cd "$(dirname "$0")/.."

# 410ba92e1b264df895e1fe6eccfe22db7aeaab06 (2026-03-13) and its tree: `git rev-parse 410ba92^{tree}`
# in a clone gives the same id that the copy's files make below.
tck_commit="410ba92e1b264df895e1fe6eccfe22db7aeaab06"
tck_tree="c7e5c4170eb3865e5daf0129e9e2c1b970517209"
tck_src="${A2A_TCK_DIR:-../shared/conformance/a2a-tck}"
tck_venv="$PWD/.tools/a2a-tck-venv"
sut="${A2A_TCK_SUT:-serve}"
outcome_args=()
case "$sut" in
  serve) outcome_args=(conformance/a2a-tck.txt --expected conformance/a2a-tck-expected-failures.txt
    --reference conformance/a2a-tck-reference.txt) ;;
  reference) outcome_args=(conformance/a2a-tck-reference.txt) ;;
  *) echo "A2A_TCK_SUT is serve or reference, not $sut" >&2; exit 2 ;;
esac
[[ "${UPDATE:-}" == 1 ]] && outcome_args+=(--update)
[[ -x "$tck_venv/bin/python" ]] || { echo "no $tck_venv: run \`make test-a2a\`" >&2; exit 2; }
[[ -f "$tck_src/run_tck.py" ]] || {
  echo "no A2A TCK at $tck_src (A2A_TCK_DIR): a copy of a2aproject/a2a-tck at $tck_commit is wanted" >&2
  exit 2
}

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# moto and the stand-in on ports of their own: a run shares no state with another checkout's.
export LOCAL_MOTO_PORT="${LOCAL_MOTO_PORT:-$(free_port)}" LOCAL_STAND_IN_PORT="${LOCAL_STAND_IN_PORT:-$(free_port)}"
source scripts/local-env.sh
work="$(mktemp -d)"
# The last run's output stays in .tools/a2a-tck-last/<sut>/ (the TCK's log, its JSON report, the SUT's log).
last=".tools/a2a-tck-last/$sut"
keep() { rm -rf "$last" && mkdir -p "$last" && cp "$work"/{tck.log,report.json,push.log,push-report-streaming.json,push-report-rest.json,sut.err} "$last"/ 2>/dev/null || true; }
trap 'stop_local; keep; rm -rf "$work"' EXIT
started=$SECONDS

section "the A2A TCK from $tck_src, copied to a work folder and checked against $tck_commit"
mkdir "$work/tck"
tar -C "$tck_src" --exclude=./.git --exclude=.venv --exclude=__pycache__ --exclude=.pytest_cache -cf - . |
  tar -C "$work/tck" -xf -
chmod -R u+w "$work/tck"
tree="$(
  export GIT_DIR="$work/tree.git" GIT_INDEX_FILE="$work/tree.index"
  git init --quiet --bare "$GIT_DIR"
  git -c core.excludesFile=/dev/null -c core.autocrlf=false -c core.fileMode=true --work-tree="$work/tck" add -A .
  git write-tree
)"
if [[ "$tree" != "$tck_tree" ]]; then
  echo "the TCK at $tck_src is not a2a-tck's $tck_commit (its files make tree $tree, not $tck_tree)" >&2
  [[ -d "$tck_src/.git" ]] && echo "(a clone: \`git -C $tck_src checkout ${tck_commit:0:7}\`)" >&2
  exit 2
fi

# A token for the TCK: a bearer for serve (of an issuer made here), any word for the reference.
issuer_port="$(free_port)"
if [[ "$sut" == serve ]]; then
  start_moto
  start_model
  "$bin" setup --table "$TABLE_NAME" >/dev/null

  section "an issuer of tokens on 127.0.0.1:$issuer_port (its key made here)"
  token="$("$tck_venv/bin/python" - "$work" "http://127.0.0.1:$issuer_port" <<'PY'
import json, sys, time, jwt
from cryptography.hazmat.primitives.asymmetric import rsa
work, issuer = sys.argv[1], sys.argv[2]
key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
jwk.update({"kid": "tck", "alg": "RS256", "use": "sig"})
json.dump({"keys": [jwk]}, open(f"{work}/jwks.json", "w"))
now = int(time.time())
claims = {"iss": issuer, "aud": "a2a-tck", "sub": "tck", "iat": now, "exp": now + 3600}
print(jwt.encode(claims, key, algorithm="RS256", headers={"kid": "tck"}))
PY
)"
  (cd "$work" && exec python3 -m http.server "$issuer_port" --bind 127.0.0.1 >/dev/null 2>&1) &
  local_pids+=($!)
  wait_for_port "$issuer_port"
fi

# A free port, so that the card can name the agent as a client outside would (PUBLIC_URL; the
# TCK reads an address like 127.0.0.1 in a public card as a leak of an internal one).
port="$(free_port)"
: >"$work/sut.err"
if [[ "$sut" == serve ]]; then
  section "agent-worker serve --auth jwt"
  AUTH=jwt JWT_ISSUER="http://127.0.0.1:$issuer_port" JWT_AUDIENCE=a2a-tck JWT_ACCOUNT=tck \
    JWKS_URL="http://127.0.0.1:$issuer_port/jwks.json" EVENT_SINKS=dynamo PUBLIC_URL="http://localhost:$port" \
    A2A_PUSH=on A2A_PUSH_LOOPBACK=true \
    "$bin" serve --port "$port" --host 127.0.0.1 2>"$work/sut.err" &
  local_pids+=($!)
  url=""
  for _ in $(seq 1 400); do
    url="$(sed -n 's/^agent-worker serving turns on \(http[^ ]*\).*/\1/p' "$work/sut.err" | head -n 1)"
    [[ -n "$url" ]] && break
    sleep 0.05
  done
  [[ -n "$url" ]] || { cat "$work/sut.err" >&2; exit 1; }
else
  section "a2a-sdk's own server (scripts/a2a_reference_agent.py) on 127.0.0.1:$port"
  token="reference-$RANDOM$RANDOM"
  .venv/bin/python scripts/a2a_reference_agent.py "$port" "$token" >/dev/null 2>"$work/sut.err" &
  local_pids+=($!)
  wait_for_port "$port" || { cat "$work/sut.err" >&2; exit 1; }
  url="http://127.0.0.1:$port"
fi

section "the A2A TCK (mandatory) against $url (its output: $last/tck.log)"
status=0
(
  cd "$work/tck"
  A2A_AUTH_TYPE=bearer A2A_AUTH_TOKEN="$token" \
    PYTEST_ADDOPTS="--json-report --json-report-file=$work/report.json --json-report-omit=collectors,log,keywords" \
    "$tck_venv/bin/python" run_tck.py --sut-url "$url/a2a" --category mandatory
) >"$work/tck.log" 2>&1 || status=$?
# run_tck.py exits 1 when a test fails (which the lists judge); anything else is the run's failure.
if (( status > 1 )) || [[ ! -s "$work/report.json" ]]; then
  cat "$work/tck.log" >&2
  echo "the TCK did not run to its end (exit $status)" >&2
  exit 1
fi

if [[ "$sut" == serve ]]; then
  header=("The A2A TCK (a2aproject/a2a-tck ${tck_commit:0:7}), category mandatory, against \`agent-worker serve\`"
    "(scripts/a2a_tck.sh): one test a line and its outcome. \`make test-a2a UPDATE=1\` writes it,"
    "\`make test-a2a\` checks a run against it.")
else
  header=("The A2A TCK (a2aproject/a2a-tck ${tck_commit:0:7}), category mandatory, against a2a-sdk's own server"
    "(scripts/a2a_reference_agent.py): one test a line and its outcome."
    "\`make test-a2a A2A_TCK_SUT=reference UPDATE=1\` writes it.")
fi
header_args=()
for line in "${header[@]}"; do header_args+=(--header "$line"); done
"$tck_venv/bin/python" scripts/a2a_tck_outcome.py "$work/report.json" "${outcome_args[@]}" "${header_args[@]}" || {
  echo "(the SUT's log:)" >&2
  tail -n 40 "$work/sut.err" >&2
  exit 1
}
if [[ "$sut" == serve ]]; then
  push_tests="tests/optional/capabilities/test_push_notification_config_methods.py"
  section "the A2A TCK's push notification tests ($push_tests; its webhook on localhost:8888; their log, what the webhook received included: $last/push.log)"
  # In two pytest processes, the streaming test alone first. The suite's webhook lives as long as
  # its pytest session, and a test waiting for a notification stops at the first the webhook holds,
  # its own or one a test before it caused: the streaming test, run after the others, found the
  # notifications of the test before and failed when its own came a moment after its look. Alone,
  # the webhook's first notification is its own task's. (The other test that waits for one runs
  # after eight that push nothing, in a session of its own.)
  push_reports=()
  for part in streaming rest; do
    if [[ "$part" == streaming ]]; then select=(-k "test_send_streaming_message_with_push_notification_config")
    else select=(-k "not test_send_streaming_message_with_push_notification_config"); fi
    status=0
    (
      cd "$work/tck"
      A2A_AUTH_TYPE=bearer A2A_AUTH_TOKEN="$token" \
        PYTEST_ADDOPTS="--json-report --json-report-file=$work/push-report-$part.json --json-report-omit=collectors,log,keywords" \
        "$tck_venv/bin/python" -m pytest "$push_tests" "${select[@]}" --sut-url="$url/a2a" --test-scope=all --tb=short \
          --log-cli-level=INFO
    ) >>"$work/push.log" 2>&1 || status=$?
    if (( status > 1 )) || [[ ! -s "$work/push-report-$part.json" ]]; then
      cat "$work/push.log" >&2
      echo "the TCK's push tests ($part) did not run to their end (exit $status)" >&2
      exit 1
    fi
    push_reports+=("$work/push-report-$part.json")
  done
  push_args=(conformance/a2a-tck-push.txt
    --header "The A2A TCK (a2aproject/a2a-tck ${tck_commit:0:7}), its push notification tests, against \`agent-worker serve\`"
    --header "with pushes on (scripts/a2a_tck.sh): one test a line and its outcome, every one expected to pass.")
  [[ "${UPDATE:-}" == 1 ]] && push_args+=(--update)
  "$tck_venv/bin/python" scripts/a2a_tck_outcome.py "$(IFS=,; echo "${push_reports[*]}")" "${push_args[@]}" || {
    echo "(the SUT's log:)" >&2
    tail -n 40 "$work/sut.err" >&2
    exit 1
  }
fi
echo "a2a-tck: $((SECONDS - started)) s"
