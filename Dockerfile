# Build:  docker build -t agentdesk .
# Run:    docker compose up   (PostgreSQL included), or
#         docker run -e DATABASE_URL=postgres://... -p 8080:8080 agentdesk

FROM rust:1-bookworm AS builder
WORKDIR /app

# Dependencies first, against stub sources, so that this layer is rebuilt
# only when Cargo.toml or Cargo.lock change, not on every source edit.
# The workspace's other members (test support, benchmark) are stubbed too: cargo
# loads every member's manifest even to build one binary.
COPY Cargo.toml Cargo.lock ./
COPY testkit/Cargo.toml testkit/
COPY bench/Cargo.toml bench/
COPY docker/stub-targets.sh /usr/local/bin/stub-targets
RUN stub-targets Cargo.toml > /tmp/stubs \
    && for member in testkit bench; do \
        (cd "$member" && stub-targets Cargo.toml | sed "s|^|$member/|") >> /tmp/stubs; \
    done \
    && cargo build --release --locked --bin agentdesk \
    && xargs rm -f < /tmp/stubs \
    && rm -rf src testkit/src bench/src

# The whole context (see .dockerignore), so that anything the crate pulls in
# at compile time (migrations, include_str! files) is there.
COPY . .
# COPY keeps the files' own mtimes, which can be older than the stub build's
# outputs; touching them makes cargo rebuild the real crate.
RUN find . -path ./target -prune -o -name '*.rs' -exec touch {} + \
    && cargo build --release --locked --bin agentdesk \
    && cp target/release/agentdesk /usr/local/bin/agentdesk

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 10001 --create-home --home-dir /home/agentdesk \
        --shell /usr/sbin/nologin agentdesk
# Migrations are embedded in the binary: it is all the image needs.
COPY --from=builder /usr/local/bin/agentdesk /usr/local/bin/agentdesk
USER 10001
WORKDIR /home/agentdesk
ENV AGENTDESK_ADDR=0.0.0.0:8080
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["agentdesk", "healthcheck"]
ENTRYPOINT ["agentdesk"]
CMD ["serve"]
