# agent-worker: the two commands are `make demo` and `make test`.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c

export CARGO_TARGET_DIR ?= $(CURDIR)/target
# Local defaults only: nothing here reaches AWS or the instance metadata service unless asked.
export AWS_EC2_METADATA_DISABLED := true
export AWS_REGION ?= us-east-1
export SAM_CLI_TELEMETRY := 0

VENV := .venv
PY_TOOLS := $(VENV)/.installed
# newman runs the Agent Protocol's official Postman suite; it lives in a project-local npm prefix.
NODE_PREFIX := .node
NEWMAN_VERSION := 6.2.2
MCP_EVERYTHING_VERSION := 2026.8.31
# The official TypeScript SDK, which the test kit's own MCP server (mcp/desk-mcp.cjs) runs on.
MCP_SDK_VERSION := 1.32.2
# The browser suite's driver (it drives the system's Chromium; it downloads no browser).
PLAYWRIGHT_VERSION := 1.65.1
# AG-UI's own client, which the AG-UI tests run against `POST /agui` (it validates every event).
AGUI_CLIENT_VERSION := 1.0.0
# The typed client's tools (clients/typescript): its types made from docs/openapi.json, its build.
OPENAPI_TS_VERSION := 7.13.0
TYPESCRIPT_VERSION := 5.9.3
# The unused-dependency check of `make lint`, built from crates.io into a project-local root.
MACHETE_VERSION := 0.9.2
MACHETE := .tools/cargo-machete-$(MACHETE_VERSION)/bin/cargo-machete
# The A2A TCK's Python packages, pinned, in a venv of their own (they are not the tests' or SAM's).
TCK_VENV := .tools/a2a-tck-venv
TCK_TOOLS := $(TCK_VENV)/.installed
A2A_TCK_DIR ?= ../shared/conformance/a2a-tck
NODE_TOOLS := $(NODE_PREFIX)/.installed-newman-$(NEWMAN_VERSION)-mcp-$(MCP_EVERYTHING_VERSION)-sdk-$(MCP_SDK_VERSION)-pw-$(PLAYWRIGHT_VERSION)-agui-$(AGUI_CLIENT_VERSION)-oats-$(OPENAPI_TS_VERSION)-ts-$(TYPESCRIPT_VERSION)

.PHONY: test test-build test-browser test-a2a demo demo-tools demo-build lint fmt openapi client bench build venv node-tools watch invoke watch-check lambda-build deploy record-fixture eval-live

## test: every unit, integration and doc test (moto and the Bedrock stand-in start inside the tests).
## The tools install while the tests build (`-j3`: cargo keeps its two jobs beside pip or npm).
test:
	$(MAKE) --no-print-directory -j3 $(PY_TOOLS) $(NODE_TOOLS) test-build
	cargo test --workspace --all-features --locked

test-build:
	cargo test --workspace --all-features --locked --no-run

## test-a2a: the A2A TCK's mandatory category (a2aproject/a2a-tck at 410ba92, a plain copy at
## A2A_TCK_DIR, by default the project's ../shared/conformance/a2a-tck) against `serve` on local
## defaults, checked against conformance/a2a-tck.txt and the expected failures with their reasons
## (conformance/a2a-tck-expected-failures.txt); any other outcome fails. UPDATE=1 rewrites both
## from the run; A2A_TCK_SUT=reference runs it against a2a-sdk's own server instead
## (conformance/a2a-tck-reference.txt).
test-a2a: $(PY_TOOLS) $(TCK_TOOLS) build
	A2A_TCK_DIR="$(A2A_TCK_DIR)" scripts/a2a_tck.sh

## record-fixture: one call on live Bedrock (your credentials; MODEL_ID, AWS_REGION) written as a
## fixture the stand-in replays byte for byte (OUT=file; tests/bedrock_fixtures.rs shows a replay).
## It refuses, saying so, without credentials. Nothing in `make test` needs it.
record-fixture: build
	$(CARGO_TARGET_DIR)/debug/agent-worker record --out $(or $(OUT),tests/fixtures/bedrock/recorded-converse-stream.json)

## eval-live: a tool turn, a typed result, an approval, a stopped turn, a conversation past its
## summary, and the operating rules (a failed tool, a file's instructions, a misheard spoken
## request) on live Bedrock (your credentials; MODEL_ID, AWS_REGION): pass or fail, tokens and cost.
eval-live: build
	$(CARGO_TARGET_DIR)/debug/agent-worker eval

## demo: a turn sent through SQS, run by the real handler, stored in DynamoDB (moto + the stand-in).
## It builds only what it runs: the `agent-worker` command and the stand-ins (the same features as
## `build` and `make test`, so no dependency is built twice).
demo:
	$(MAKE) --no-print-directory -j3 $(PY_TOOLS) demo-build
	scripts/demo.sh

## demo-tools: the fixture help desk's API as the agent's tools, by configuration alone.
demo-tools: $(PY_TOOLS) demo-build
	scripts/demo_tools.sh

demo-build:
	cargo build --workspace --all-features --locked --bin agent-worker --bin bedrock-stand-in --bin desk-api

## test-browser: the console page in headless Chromium (Debian's chromium package): a turn
## streams, the model adds a task to the page, a delete waits for the click, stop, a steer, reload.
test-browser: $(PY_TOOLS) $(NODE_TOOLS) build
	scripts/browser_test.sh

## lint: formatting and clippy, warnings are errors; no dependency that nothing uses; BENCHMARKS.md's
## front section is what benchmarks/results.json says.
lint: $(MACHETE)
	cargo fmt --all --check
	$(MACHETE) --skip-target-dir
	cargo clippy --workspace --all-features --all-targets --locked -- -D warnings
	# The builds users make: the function alone, the library bare, each host's crate alone (the
	# container host has no Lambda runtime in it; the runtime no server and no Lambda runtime).
	cargo check --locked --bin bootstrap
	cargo check --locked --lib --no-default-features
	cargo check --locked -p agent-worker-runtime --no-default-features
	cargo check --locked -p agent-worker-container
	cargo check --locked -p agent-worker-lambda
	cargo check --locked -p agent-worker-contract
	cargo check --locked -p agent-worker-core
	cargo check --locked -p agent-worker-aws --all-features
	cargo check --locked -p agent-worker-http
	cargo check --locked -p agent-worker-agent-protocol
	python3 scripts/module_cycles.py
	python3 scripts/bench_front.py --check

fmt:
	cargo fmt --all

## openapi: writes docs/openapi.json, the HTTP API's OpenAPI 3.1 document, from the host's routes and
## types (`agent-worker openapi`; tests/openapi.rs fails while the repository's copy differs).
openapi:
	cargo run --quiet --all-features --locked --bin agent-worker -- openapi > docs/openapi.json.new
	mv docs/openapi.json.new docs/openapi.json

## client: the typed client's types from docs/openapi.json (openapi-typescript) and its build (tsc),
## both kept in clients/typescript (tests/typescript_client.rs fails while either differs).
client: $(NODE_TOOLS) openapi
	$(NODE_PREFIX)/node_modules/.bin/openapi-typescript docs/openapi.json --output clients/typescript/src/api.ts
	rm -rf clients/typescript/dist
	$(NODE_PREFIX)/node_modules/.bin/tsc -p clients/typescript/tsconfig.json

$(MACHETE):
	cargo install --locked --quiet --root .tools/cargo-machete-$(MACHETE_VERSION) cargo-machete@$(MACHETE_VERSION)

## bench: turn latency and throughput against the stand-in (a program, not a test), and the same
## turns on rig beside ours (benches/peers/rig: its own workspace, nothing we ship depends on it);
## then BENCHMARKS.md's front section is written again from the run's benchmarks/results.json.
bench:
	cargo build --release --locked --manifest-path benches/peers/rig/Cargo.toml
	cargo build --release --locked -p floor-peer
	RIG_PEER=$(CARGO_TARGET_DIR)/release/rig-peer FLOOR_PEER=$(CARGO_TARGET_DIR)/release/floor-peer \
	  cargo bench --all-features --locked --bench turns
	python3 scripts/bench_front.py

build:
	cargo build --workspace --all-features --locked --bins

## venv: moto, cfn-lint and the SAM CLI in a project-local virtualenv.
venv: $(PY_TOOLS)
$(PY_TOOLS): requirements-dev.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -r requirements-dev.txt
	touch $@

$(TCK_TOOLS): conformance/a2a-tck-requirements.txt
	rm -rf $(TCK_VENV)
	python3 -m venv $(TCK_VENV)
	$(TCK_VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps -r conformance/a2a-tck-requirements.txt
	$(TCK_VENV)/bin/pip check --disable-pip-version-check
	touch $@

## node-tools: newman (the Agent Protocol suite's runner), the MCP reference server, the MCP
## TypeScript SDK, playwright-core (the browser suite's driver) and @ag-ui/client (AG-UI's
## client, for the AG-UI tests), in a project-local npm prefix.
node-tools: $(NODE_TOOLS)
$(NODE_TOOLS):
	npm install --prefix $(NODE_PREFIX) --no-audit --no-fund --no-save --loglevel=error newman@$(NEWMAN_VERSION) @modelcontextprotocol/server-everything@$(MCP_EVERYTHING_VERSION) @modelcontextprotocol/sdk@$(MCP_SDK_VERSION) playwright-core@$(PLAYWRIGHT_VERSION) @ag-ui/client@$(AGUI_CLIENT_VERSION) openapi-typescript@$(OPENAPI_TS_VERSION) typescript@$(TYPESCRIPT_VERSION)
	touch $@

$(VENV)/bin/cargo-lambda: $(PY_TOOLS)
	$(VENV)/bin/pip install --quiet cargo-lambda==1.9.2

## watch: the Lambda functions (bootstrap, and api at /lambda-url/api/) under `cargo lambda watch` on
## local defaults (moto + the stand-in, started or reused, the table and a queue); then `make invoke`.
watch: $(VENV)/bin/cargo-lambda build
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" scripts/watch.sh

## invoke: sends events/one-turn.json to `make watch`'s function as a new turn (TURN_ID=... repeats
## one) and prints the batch response and the stored conversation.
invoke: $(VENV)/bin/cargo-lambda
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" scripts/invoke.sh

## watch-check: `make watch`, then `make invoke` twice, checked (CI runs it).
watch-check: $(VENV)/bin/cargo-lambda build
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" scripts/watch_check.sh

## lambda-build: the arm64 bootstrap for provided.al2023, as `sam build` makes it.
lambda-build: $(VENV)/bin/cargo-lambda
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" cargo lambda build --release --arm64 --bin bootstrap

## deploy: builds and deploys template.yaml with your AWS credentials.
deploy: $(PY_TOOLS) $(VENV)/bin/cargo-lambda
	unset AWS_EC2_METADATA_DISABLED; PATH="$(CURDIR)/$(VENV)/bin:$$PATH" sam build && PATH="$(CURDIR)/$(VENV)/bin:$$PATH" sam deploy --guided
