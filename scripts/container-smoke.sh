#!/usr/bin/env bash
# The container, end to end: builds the image, starts docker-compose.yml (PostgreSQL, one api,
# two workers) against a stand-in model server on the host, waits until every service is healthy,
# runs a ticket to done, then stops the workers while a ticket is in flight and checks that they
# exit 0 within the grace period (not 137: killed) and that the ticket is released, not lost.
#
#   bash scripts/container-smoke.sh        (needs a Docker engine and its compose)
#
# Exits 0 when every check passed, 1 when one failed, and 77 (skipped) when there is no Docker
# engine, no compose, or the base images cannot be pulled or found locally.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

skip() {
    echo "SKIPPED: $*"
    exit 77
}

docker info >/dev/null 2>&1 || skip "no Docker engine reachable"
if docker compose version >/dev/null 2>&1; then
    compose=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
    compose=(docker-compose)
else
    skip "neither docker compose nor docker-compose is installed"
fi
for image in rust:1-bookworm debian:bookworm-slim postgres:16; do
    docker image inspect "$image" >/dev/null 2>&1 || docker pull -q "$image" >/dev/null 2>&1 \
        || skip "base image $image can be neither found nor pulled"
done

project=agentdesk-smoke
model_port=${SMOKE_MODEL_PORT:-18081}
api_port=${SMOKE_API_PORT:-18080}
token=smoke-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
work=$(mktemp -d)
model_pid=
# Everything the compose file reads from the environment is set here, so that a .env beside it
# (a developer's provider keys, model, port) changes nothing: shell variables win over .env.
dc() {
    AGENTDESK_API_TOKENS=$token AGENTDESK_PORT=127.0.0.1:$api_port \
        OPENAI_BASE_URL=http://host.docker.internal:$model_port/v1 OPENAI_API_KEY=fake \
        ANTHROPIC_API_KEY= ANTHROPIC_BASE_URL= AGENTDESK_MODEL= RUST_LOG= \
        "${compose[@]}" -p "$project" -f docker-compose.yml "$@"
}
cleanup() {
    local rc=$?
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then
        echo "---- logs ----"
        dc logs --tail 40 || true
        echo "---- model server ----"
        tail -n 20 "$work/model.log" || true
    fi
    dc down -v >/dev/null 2>&1 || true
    [ -n "$model_pid" ] && kill "$model_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
# What a run that was killed before its cleanup left (containers, the database volume) goes first:
# the test starts from an empty database.
dc down -v >/dev/null 2>&1 || true

python3 scripts/fake-model.py "$model_port" 2>"$work/model.log" &
model_pid=$!
for _ in $(seq 1 50); do
    curl -sf -o /dev/null "http://127.0.0.1:$model_port/v1/models" && break
    kill -0 "$model_pid" 2>/dev/null || { echo "FAIL: the stand-in model server did not start (port $model_port taken? set SMOKE_MODEL_PORT)"; exit 1; }
    sleep 0.1
done

echo "== build"
started=$SECONDS
docker build -q -t agentdesk:latest . >/dev/null
echo "built in $((SECONDS - started)) s: $(docker image inspect agentdesk:latest --format '{{.Size}}' | awk '{printf "%.0f MB", $1/1e6}')"

echo "== up (1 api, 2 workers)"
started=$SECONDS
dc up -d --no-build --scale worker=2 >/dev/null
healthy=
for _ in $(seq 1 90); do
    states=$(docker ps --filter "label=com.docker.compose.project=$project" --format '{{.Names}} {{.Status}}')
    if [ "$(echo "$states" | wc -l)" -ge 4 ] && ! echo "$states" | grep -qv '(healthy)'; then
        healthy=yes
        break
    fi
    sleep 2
done
echo "$states"
[ -n "$healthy" ] || { echo "FAIL: not every service became healthy"; exit 1; }
echo "healthy in $((SECONDS - started)) s"

api=http://127.0.0.1:$api_port
auth=(-H "Authorization: Bearer $token")
[ "$(curl -s -o /dev/null -w '%{http_code}' "$api/v1/tickets")" = 401 ] || { echo "FAIL: the API answered without a token"; exit 1; }

echo "== a ticket to done"
key=$(curl -sf "${auth[@]}" -X POST "$api/v1/tickets" -d '{"task": "say ok"}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
status=
for _ in $(seq 1 60); do
    status=$(curl -sf "${auth[@]}" "$api/v1/tickets/$key" | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"])')
    [ "$status" = done ] && break
    sleep 1
done
[ "$status" = done ] || { echo "FAIL: $key is $status, not done"; exit 1; }
echo "$key done"

echo "== stop the workers with a ticket in flight"
slow=$(curl -sf "${auth[@]}" -X POST "$api/v1/tickets" -d '{"task": "slow job"}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
for _ in $(seq 1 30); do
    status=$(curl -sf "${auth[@]}" "$api/v1/tickets/$slow" | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"])')
    [ "$status" = in_progress ] && break
    sleep 1
done
[ "$status" = in_progress ] || { echo "FAIL: $slow never started"; exit 1; }
started=$SECONDS
dc stop worker >/dev/null
echo "stopped in $((SECONDS - started)) s"
failed=
for container in $(docker ps -a --filter "label=com.docker.compose.project=$project" --filter "label=com.docker.compose.service=worker" --format '{{.Names}}'); do
    code=$(docker inspect -f '{{.State.ExitCode}}' "$container")
    echo "$container exited $code"
    [ "$code" = 0 ] || failed=yes
done
[ -z "$failed" ] || { echo "FAIL: a worker did not exit 0 (137 = killed before it released its tickets)"; exit 1; }
status=$(curl -sf "${auth[@]}" "$api/v1/tickets/$slow" | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"])')
[ "$status" = todo ] || { echo "FAIL: $slow is $status after the workers stopped, not todo (released)"; exit 1; }
echo "$slow released to todo"

echo "== data kept across down and up"
dc down >/dev/null
dc up -d --no-build >/dev/null
for _ in $(seq 1 60); do
    curl -sf "${auth[@]}" "$api/v1/tickets/$key" >/dev/null 2>&1 && break
    sleep 1
done
curl -sf "${auth[@]}" "$api/v1/tickets/$key" >/dev/null || { echo "FAIL: $key is gone after down/up"; exit 1; }
echo "$key still there"
echo "container smoke test passed"
