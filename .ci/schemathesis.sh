#!/usr/bin/env bash
# Fuzzes the running service against its own OpenAPI document with schemathesis (a pinned version
# in a cached virtualenv): every check, the coverage, fuzzing and stateful phases; any finding
# fails. One worker: schemathesis' example generation is not safe across threads (two workers
# once failed with hypothesis' "Inconsistent results" inside its own code). Needs DATABASE_URL; builds and starts the debug binary with a token and no model provider.
set -euo pipefail

SCHEMATHESIS_VERSION=4.32.5
CACHE=${AGENTDESK_CI_CACHE:-$HOME/.cache/agentdesk-ci}
VENV=$CACHE/schemathesis-$SCHEMATHESIS_VERSION
MAX_EXAMPLES=${SCHEMATHESIS_MAX_EXAMPLES:-20}

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ ! -x "$VENV/bin/st" ]; then
    python3 -m venv "$VENV"
    PIP_CACHE_DIR=$CACHE/pip "$VENV/bin/pip" install --quiet "schemathesis==$SCHEMATHESIS_VERSION"
fi

# AGENTDESK_BIN: a binary built already (CI builds the debug one here).
BIN=${AGENTDESK_BIN:-}
if [ -z "$BIN" ]; then
    cargo build --bin agentdesk
    BIN=${CARGO_TARGET_DIR:-target}/debug/agentdesk
fi
# A database of its own, so that what the fuzzer creates stays out of the tests' way.
FUZZ_DB=agentdesk_schemathesis_$$
BASE_URL=${DATABASE_URL%/*}
psql "$DATABASE_URL" -qc "DROP DATABASE IF EXISTS $FUZZ_DB WITH (FORCE)" -c "CREATE DATABASE $FUZZ_DB"

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
TOKEN=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
LOG=$(mktemp)
env -i PATH="$PATH" HOME="$HOME" DATABASE_URL="$BASE_URL/$FUZZ_DB" AGENTDESK_ADDR="127.0.0.1:$PORT" \
    AGENTDESK_API_TOKENS="$TOKEN" AGENTDESK_WORKERS=4 RUST_LOG=warn \
    "$BIN" serve >"$LOG" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true
      psql "$DATABASE_URL" -qc "DROP DATABASE IF EXISTS $FUZZ_DB WITH (FORCE)" || true' EXIT
for _ in $(seq 1 100); do
    curl -fs "http://127.0.0.1:$PORT/readyz" >/dev/null && break
    sleep 0.2
done

# Every check with its default rules: a request the document allows must not be refused (no
# 400 or 422), and one it does not allow must be. The only exception is 422 for the operations
# below, each for a rule that no JSON Schema can state because it depends on another field or on
# what the desk holds, or for a protocol's own way of answering (JSON-RPC errors come with HTTP
# 200); each is named with its reason. The agent protocols (`/mcp`, A2A) are fuzzed too, as
# documented (a message for labels no agent takes is answered at once, with its task submitted).
# tests/mcp_server.rs, tests/a2a.rs and the official clients in tests/protocol_clients.rs check
# what they answer.
CONFIG=$(mktemp --suffix=.toml)
cat >"$CONFIG" <<'TOML'
# `parent` must name an existing ticket, and `schema` must be a valid JSON Schema.
[[operations]]
include-name = "POST /v1/tickets"
checks.positive_data_acceptance.expected-statuses = ["2xx", "3xx", "401", "403", "404", "409", "422", "429"]

# `provider`, `tools` and `tool_choice` must name a provider and tools that exist.
[[operations]]
include-name = "PUT /v1/agents/{name}"
checks.positive_data_acceptance.expected-statuses = ["2xx", "3xx", "401", "403", "404", "409", "422", "429"]

# A rollback names a version the agent has; a batch of approvals gives exactly one of
# `decisions`, `approve_all` and `deny_all`, naming calls that wait.
[[operations]]
include-name = ["POST /v1/agents/{name}/rollback", "POST /v1/tickets/{ticket}/approvals"]
checks.positive_data_acceptance.expected-statuses = ["2xx", "3xx", "401", "403", "404", "409", "422", "429"]

# An answer must be one of the question's choices or match its schema; a replay or an
# experiment names agents, versions, providers and tickets that exist, and an experiment's
# filter must pick some ticket; a done experiment cannot be cancelled.
[[operations]]
include-name = ["POST /v1/tickets/{ticket}/questions/{id}", "POST /v1/tickets/{ticket}/replay", "POST /v1/experiments", "POST /v1/experiments/{id}/cancel"]
checks.positive_data_acceptance.expected-statuses = ["2xx", "3xx", "401", "403", "404", "409", "422", "429"]
# `cron` must be a cron expression, `timezone` an IANA zone, `end_at` after `start_at`.
[[operations]]
include-name = ["POST /v1/schedules", "PATCH /v1/schedules/{schedule}"]
checks.positive_data_acceptance.expected-statuses = ["2xx", "3xx", "401", "403", "404", "409", "422", "429"]

# A webhook URL naming a loopback, private, link-local, multicast or metadata address is refused
# (the address guard; AGENTDESK_ALLOW_PRIVATE_URLS lifts it).
[[operations]]
include-name = ["POST /v1/webhooks", "PATCH /v1/webhooks/{id}"]
checks.positive_data_acceptance.expected-statuses = ["2xx", "3xx", "401", "403", "404", "409", "422", "429"]

# The other way round: an HTTP tool's or an MCP server's URL may hold `{placeholders}` and
# `${env:NAME}` templates anywhere, which the documented pattern (a plain URL) leaves out, so
# these take some URLs that the document does not show.
[[operations]]
include-name = ["PUT /v1/tools/{name}", "PUT /v1/mcp-servers/{name}"]
checks.negative_data_rejection.expected-statuses = ["2xx", "400", "401", "403", "404", "405", "406", "409", "415", "422", "428", "429"]

# MCP: a request other than `initialize` needs the session `initialize` answered with
# (`Mcp-Session-Id`), unless it speaks the stateless 2026-07-28 revision: 400 names the rule.
# JSON-RPC answers its own errors (invalid params, an unknown method) with HTTP 200 and an
# `error` member, as the protocol has it.
[[operations]]
include-name = "POST /mcp"
checks.positive_data_acceptance.expected-statuses = ["2xx", "3xx", "400", "401", "403", "404", "409", "429"]
checks.negative_data_rejection.expected-statuses = ["200", "400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429"]

# A2A over JSON-RPC: errors are JSON-RPC error objects with HTTP 200.
[[operations]]
include-name = "POST /a2a/jsonrpc"
checks.negative_data_rejection.expected-statuses = ["200", "400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429"]

# A2A: a `messageId` names one message; sending another with the same id is refused.
[[operations]]
include-name = ["POST /a2a/message:send", "POST /a2a/message:stream"]
checks.positive_data_acceptance.expected-statuses = ["2xx", "3xx", "400", "401", "403", "404", "409", "429"]

# `pageToken` must be the `nextPageToken` of a page of the same list.
[[operations]]
include-name = "GET /a2a/tasks"
checks.positive_data_acceptance.expected-statuses = ["2xx", "3xx", "400", "401", "403", "404", "409", "429"]
TOML
set +e
"$VENV/bin/st" --config-file "$CONFIG" run "http://127.0.0.1:$PORT/openapi.json" \
    --header "Authorization: Bearer $TOKEN" \
    --checks all \
    --phases examples,coverage,fuzzing,stateful \
    --max-examples "$MAX_EXAMPLES" \
    --workers 1 \
    --generation-deterministic \
    --generation-allow-x00 false \
    --no-color \
    "$@"
rc=$?
set -e
if [ "$rc" -ne 0 ]; then
    echo "schemathesis found problems (the service's log follows)" >&2
    tail -n 40 "$LOG" >&2
fi
exit "$rc"
