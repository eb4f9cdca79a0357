# Build:  docker build -t agentdesk .   (docker compose up --build builds it too, once)
# Run:    docker compose up   (PostgreSQL and a proxy included), or
#         docker run -e DATABASE_URL=postgres://... -e AGENTDESK_API_TOKENS=... -p 8080:8080 agentdesk

FROM rust:1-bookworm AS builder
# Names what the legacy builder leaves behind of this stage, so scripts/container-smoke.sh can
# remove it.
LABEL agentdesk.stage=builder
WORKDIR /app

# Extra certificate authorities, such as a TLS-intercepting proxy's between this build and
# crates.io: the *.crt files put in docker/ca-certificates/ (none by default; see its README.md).
# A directory of the build context works with every builder, the legacy one included, which has
# no build secrets.
COPY docker/ca-certificates/ /usr/local/share/ca-certificates/agentdesk/
RUN update-ca-certificates
ENV CARGO_HTTP_CAINFO=/etc/ssl/certs/ca-certificates.crt

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
    && rm -rf src

# Only what the binary is built from: its sources (with the board's assets,
# which are compiled in) and the migrations it embeds. The other members keep
# their stubs, so editing the README, the tests or the benchmark rebuilds nothing.
COPY src src
COPY migrations migrations
# COPY keeps the files' own mtimes, which can be older than the stub build's
# outputs; touching them makes cargo rebuild the real crate.
RUN find src -name '*.rs' -exec touch {} + \
    && cargo build --release --locked --bin agentdesk \
    && strip target/release/agentdesk \
    && cp target/release/agentdesk /usr/local/bin/agentdesk

FROM debian:bookworm-slim
LABEL org.opencontainers.image.title="agentdesk" \
      org.opencontainers.image.description="A self-hosted ticket desk where AI agents work tickets" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="0.1.0"
# The same extra authorities are trusted at run time (model providers, tools, webhooks behind
# the same proxy); SSL_CERT_FILE adds others without a rebuild (README: "Configuration").
COPY docker/ca-certificates/ /usr/local/share/ca-certificates/agentdesk/
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && update-ca-certificates \
    && useradd --uid 10001 --create-home --home-dir /home/agentdesk \
        --shell /usr/sbin/nologin agentdesk
# Migrations are embedded in the binary: it is all the image needs.
COPY --from=builder /usr/local/bin/agentdesk /usr/local/bin/agentdesk
USER 10001
WORKDIR /home/agentdesk
# Listens on all interfaces, which agentdesk allows only with AGENTDESK_API_TOKENS
# set (see README: "Run it in containers"). AGENTDESK_CONTAINER turns the
# embedded-database fallback into a clear "set DATABASE_URL" message.
ENV AGENTDESK_ADDR=0.0.0.0:8080 \
    AGENTDESK_CONTAINER=1
EXPOSE 8080
# `serve`, `api` and `worker` all answer /healthz on AGENTDESK_ADDR (a worker
# serves only its health there).
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["agentdesk", "healthcheck"]
ENTRYPOINT ["agentdesk"]
CMD ["serve"]
