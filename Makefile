# agent-worker: the two commands are `make demo` and `make test`.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c

export CARGO_TARGET_DIR ?= $(CURDIR)/target
# Nothing here may reach AWS or the instance metadata service: local defaults only.
export AWS_EC2_METADATA_DISABLED := true
export AWS_REGION ?= us-east-1

.PHONY: test demo lint fmt bench build

## test: every unit, integration and doc test (the Bedrock stand-in starts inside the tests).
test:
	cargo test --all-features --locked

## demo: one turn end to end on the Bedrock stand-in, with a tool (BEDROCK=aws for real Bedrock).
demo: build
	scripts/demo.sh

## lint: formatting and clippy, warnings are errors.
lint:
	cargo fmt --check
	cargo clippy --all-features --all-targets --locked -- -D warnings

fmt:
	cargo fmt

## bench: turn latency and throughput against the stand-in (a program, not a test).
bench:
	cargo bench --all-features --locked --bench turns

build:
	cargo build --all-features --locked --bin agent-worker
