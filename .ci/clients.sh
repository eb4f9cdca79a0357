#!/usr/bin/env bash
# The official clients (clients/python, clients/typescript): their generated types match the
# OpenAPI document, mypy --strict and tsc --strict pass, their unit suites run against their own
# stand-in desks, and both run against a live desk (the debug binary on a database of its own,
# with scripts/fake-model.py as its model), directly and through clients/cut-proxy.py, which
# cuts their event streams. Needs DATABASE_URL, python3 and Node 18+ with npm; the virtualenv and
# node_modules are cached under the CI cache folder.
set -euo pipefail

CACHE=${AGENTDESK_CI_CACHE:-$HOME/.cache/agentdesk-ci}
VENV=$CACHE/clients-venv
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

echo "== Python: install ./clients/python (pip), mypy --strict"
[ -x "$VENV/bin/pip" ] || python3 -m venv "$VENV"
PIP_CACHE_DIR=$CACHE/pip "$VENV/bin/pip" install --quiet --upgrade "./clients/python[test]"
"$VENV/bin/mypy" --strict clients/python/src/agentdesk

echo "== TypeScript: npm ci (node_modules cached), tsc --strict"
ts_lock_hash=$(sha256sum clients/typescript/package-lock.json | cut -c1-16)
TS_MODULES=$CACHE/clients-node_modules-$ts_lock_hash
if [ ! -d "$TS_MODULES" ]; then
    (cd clients/typescript && npm_config_cache=$CACHE/npm npm ci --no-audit --no-fund --loglevel=error)
    rm -rf "$CACHE"/clients-node_modules-*
    cp -a clients/typescript/node_modules "$TS_MODULES"
elif [ ! -d clients/typescript/node_modules ]; then
    cp -a "$TS_MODULES" clients/typescript/node_modules
fi

echo "== Generated types (clients/check.sh)"
PATH="$VENV/bin:$PATH" clients/check.sh

echo "== Installing both from the repository, as users do"
scratch=$(mktemp -d)
(cd "$scratch" && npm_config_cache=$CACHE/npm npm install --no-audit --no-fund --loglevel=error "$ROOT/clients/typescript" >/dev/null \
    && node --input-type=module -e 'import { AgentDesk, ApiError } from "agentdesk"; new AgentDesk({ baseUrl: "http://127.0.0.1:1" }); if (typeof ApiError !== "function") process.exit(1)')
(cd "$scratch" && "$VENV/bin/python" -c 'from agentdesk import AgentDesk, AsyncAgentDesk, ApiError; AgentDesk("http://127.0.0.1:1")')
echo "npm install ./clients/typescript and pip install ./clients/python: both import"

echo "== Unit suites (stand-in desks)"
(cd clients/python && "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/test_unit.py)
(cd clients/typescript && npm test --silent)

echo "== A live desk with the stand-in model"
cargo build --bin agentdesk
DB=agentdesk_clients
BASE_URL=${DATABASE_URL%/*}
psql "$DATABASE_URL" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB"
MODEL_PORT=$(free_port)
PORT=$(free_port)
PROXY_PORT=$(free_port)
TOKEN=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
LOGS=$(mktemp -d)
pids=()
cleanup() {
    local rc=$?
    if [ "$rc" -ne 0 ]; then
        echo "---- the desk's log ----"
        tail -n 40 "$LOGS/desk.log" || true
        echo "---- the model's log ----"
        tail -n 10 "$LOGS/model.log" || true
    fi
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$LOGS" "$scratch"
    exit "$rc"
}
trap cleanup EXIT
python3 scripts/fake-model.py "$MODEL_PORT" 2>"$LOGS/model.log" &
pids+=($!)
python3 clients/cut-proxy.py "$PROXY_PORT" "$PORT" &
pids+=($!)
env -i PATH="$PATH" HOME="$HOME" DATABASE_URL="$BASE_URL/$DB" AGENTDESK_ADDR="127.0.0.1:$PORT" \
    AGENTDESK_API_TOKENS="$TOKEN" AGENTDESK_WORKERS=4 RUST_LOG=warn \
    OPENAI_API_KEY=fake OPENAI_BASE_URL="http://127.0.0.1:$MODEL_PORT/v1" AGENTDESK_MODEL=fake \
    "${CARGO_TARGET_DIR:-target}/debug/agentdesk" serve >"$LOGS/desk.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 150); do
    curl -fs "http://127.0.0.1:$PORT/readyz" >/dev/null && curl -fs "http://127.0.0.1:$PROXY_PORT/__stats" >/dev/null && break
    sleep 0.2
done
curl -fs "http://127.0.0.1:$PORT/readyz" >/dev/null || { echo "error: the desk did not become ready" >&2; exit 1; }

export AGENTDESK_URL="http://127.0.0.1:$PORT" AGENTDESK_CUT_URL="http://127.0.0.1:$PROXY_PORT" AGENTDESK_TOKEN="$TOKEN"
echo "== Live suites (a ticket through the model, streams cut by the proxy, the firehose resuming)"
(cd clients/python && "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/test_live.py)
(cd clients/typescript && npm run --silent test:live)
echo "Both clients passed against the live desk"
