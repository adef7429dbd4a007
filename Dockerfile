# syntax=docker/dockerfile:1
# agent-worker as a container: `agent-worker serve` on port 8080 (the product's HTTP API, AG-UI at
# /agui, and Amazon Bedrock AgentCore Runtime's contract: GET /ping, POST /invocations).
#
#   docker buildx build --platform linux/arm64 -t agent-worker .      # AgentCore Runtime (ARM64)
#   docker buildx build --platform linux/amd64 -t agent-worker .      # ECS, App Runner, a laptop
#
# The build stage runs on the builder's own platform and cross-compiles to the target one, so an
# ARM64 image builds on an x86_64 machine without emulating the compiler.
FROM --platform=$BUILDPLATFORM rust:1.94-bookworm AS build
ARG TARGETARCH
WORKDIR /src
RUN case "$TARGETARCH" in \
      arm64) echo aarch64-unknown-linux-gnu > /target ;; \
      amd64) echo x86_64-unknown-linux-gnu > /target ;; \
      *) echo "unsupported architecture $TARGETARCH" >&2; exit 1 ;; \
    esac \
 && rustup target add "$(cat /target)" \
 && if [ "$TARGETARCH" = arm64 ] && [ "$(uname -m)" != aarch64 ]; then \
      apt-get update && apt-get install -y --no-install-recommends gcc-aarch64-linux-gnu libc6-dev-arm64-cross \
      && rm -rf /var/lib/apt/lists/*; \
    fi
# A long-running server keeps cargo's position-independent link (build.rs links the Lambda
# functions position-dependent for their cold start).
ENV CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
    CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc \
    AGENT_WORKER_PIE=1
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin agent-worker --target "$(cat /target)" \
 && cp "target/$(cat /target)/release/agent-worker" /agent-worker

# A minimal base: glibc, CA certificates and a non-root user, no shell.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /agent-worker /usr/local/bin/agent-worker
EXPOSE 8080
# Configured from the environment as every host is: TABLE_NAME, MODEL_ID, AUTH and its settings
# (AGENT_WORKER_API_KEY, or JWT_ISSUER and JWT_AUDIENCE), the rest as docs/agentcore.md lists.
ENTRYPOINT ["/usr/local/bin/agent-worker", "serve"]
