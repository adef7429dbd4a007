#!/usr/bin/env bash
# The A2A TCK (a2aproject/a2a-tck, pinned below) against `agent-worker serve` on local defaults:
# moto's DynamoDB, the Bedrock stand-in (it echoes), and people known by their tokens (a key made
# here, its JWKS served on 127.0.0.1, one token for the TCK). The TCK is published on GitHub alone:
# with no copy at A2A_TCK_DIR, it is cloned from there (the machine must reach github.com).
# Usage: scripts/a2a_tck.sh [category]   (mandatory by default; `all`, `capabilities`, ...)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/local-env.sh
trap stop_local EXIT

tck_commit="410ba92"
category="${1:-mandatory}"
tck="${A2A_TCK_DIR:-.tools/a2a-tck}"
if [[ ! -d "$tck/.git" ]]; then
  section "the A2A TCK from GitHub, at $tck_commit"
  git clone --quiet https://github.com/a2aproject/a2a-tck "$tck" || {
    echo "the A2A TCK cannot be cloned (no route to github.com?): give a copy with A2A_TCK_DIR" >&2
    exit 2
  }
fi
git -C "$tck" checkout --quiet "$tck_commit"
if [[ ! -x "$tck/.venv/bin/python" ]]; then
  python3 -m venv "$tck/.venv"
  "$tck/.venv/bin/pip" install --quiet -e "$tck" pyjwt cryptography
fi

work="$(mktemp -d)"
start_moto
start_model
"$bin" setup --table "$TABLE_NAME" >/dev/null

section "an issuer of tokens on 127.0.0.1 (its key made here)"
issuer_port=4012
token="$("$tck/.venv/bin/python" - "$work" "http://127.0.0.1:$issuer_port" <<'PY'
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

section "agent-worker serve --auth jwt"
: >"$work/serve.err"
# A free port, so that the card can name the agent as a client outside would (PUBLIC_URL; the
# TCK reads an address like 127.0.0.1 in a public card as a leak of an internal one).
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
AUTH=jwt JWT_ISSUER="http://127.0.0.1:$issuer_port" JWT_AUDIENCE=a2a-tck JWT_ACCOUNT=tck \
  JWKS_URL="http://127.0.0.1:$issuer_port/jwks.json" EVENT_SINKS=dynamo PUBLIC_URL="http://localhost:$port" \
  "$bin" serve --port "$port" --host 127.0.0.1 2>"$work/serve.err" &
local_pids+=($!)
url=""
for _ in $(seq 1 400); do
  url="$(sed -n 's/^agent-worker serving turns on \(http[^ ]*\).*/\1/p' "$work/serve.err" | head -n 1)"
  [[ -n "$url" ]] && break
  sleep 0.05
done
[[ -n "$url" ]] || { cat "$work/serve.err" >&2; exit 1; }

section "the A2A TCK ($category) against $url"
cd "$tck"
A2A_AUTH_TYPE=bearer A2A_AUTH_TOKEN="$token" .venv/bin/python run_tck.py \
  --sut-url "$url/a2a" --category "$category" --compliance-report "$work/compliance.json"
