#!/usr/bin/env bash
# The container, end to end: builds the image with compose (as `docker compose up --build` does:
# one build, its cache reused), starts docker-compose.yml (PostgreSQL, the proxy, two api, two
# workers) against a stand-in model server on the host with settings that only an env file
# carries, waits until every service is healthy, checks that those settings reached the
# containers, runs a ticket to done while an event stream through the proxy watches it, stops an
# api replica and checks that the address still answers, then stops the workers while a ticket is
# in flight and checks that they exit 0 within the grace period (not 137: killed) and that the
# ticket is released, not lost. It removes what it made: containers, volume, and the images that
# the build left dangling (the legacy builder's stage image; BuildKit's cache is kept).
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
for image in rust:1-bookworm debian:bookworm-slim postgres:16 caddy:2.11; do
    docker image inspect "$image" >/dev/null 2>&1 || docker pull -q "$image" >/dev/null 2>&1 \
        || skip "base image $image can be neither found nor pulled"
done

project=agentdesk-smoke
# An image of its own: the operator's agentdesk:latest (from `up --build`) is left as it was.
image_tag=agentdesk:smoke
model_port=${SMOKE_MODEL_PORT:-18081}
api_port=${SMOKE_API_PORT:-18080}
token=smoke-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
work=$(mktemp -d)
model_pid=
events_pid=
# Settings that reach the containers only through the env file (the operator's .env): each
# changes something the test sees.
printf '%s\n' AGENTDESK_LOG_FORMAT=json AGENTDESK_RUNTIME_THREADS=1 >"$work/agentdesk.env"
# Everything the compose file reads from the environment is set here, so that a .env beside it
# (a developer's provider keys, model, port) changes nothing: shell variables win over .env, and
# the containers' env file is the test's own.
dc() {
    AGENTDESK_ENV_FILE=$work/agentdesk.env AGENTDESK_IMAGE=$image_tag \
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
    [ -n "$events_pid" ] && kill "$events_pid" 2>/dev/null || true
    [ -n "$model_pid" ] && kill "$model_pid" 2>/dev/null || true
    # The test's own image, and the builder stage that the legacy builder keeps dangling (about
    # 2.5 GB); the operator's images stay.
    docker image rm "$image_tag" >/dev/null 2>&1 || true
    docker image prune -f --filter label=agentdesk.stage=builder >/dev/null 2>&1 || true
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

echo "== build (compose, as up --build)"
started=$SECONDS
dc build api >/dev/null
echo "built in $((SECONDS - started)) s: $(docker image inspect "$image_tag" --format '{{.Size}}' | awk '{printf "%.0f MB", $1/1e6}')"

echo "== up (the proxy, 2 api, 2 workers)"
started=$SECONDS
dc up -d --no-build --scale api=2 --scale worker=2 >/dev/null
healthy=
for _ in $(seq 1 90); do
    states=$(docker ps --filter "label=com.docker.compose.project=$project" --format '{{.Names}} {{.Status}}')
    if [ "$(echo "$states" | wc -l)" -ge 6 ] && ! echo "$states" | grep -qv '(healthy)'; then
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
containers() {
    docker ps -a --filter "label=com.docker.compose.project=$project" --filter "label=com.docker.compose.service=$1" --format '{{.Names}}'
}

echo "== one image"
image=$(docker image inspect "$image_tag" --format '{{.Id}}')
for container in $(containers api) $(containers worker); do
    [ "$(docker inspect -f '{{.Image}}' "$container")" = "$image" ] \
        || { echo "FAIL: $container does not run the image that compose built"; exit 1; }
done
echo "api and worker run $image"

echo "== the env file's settings reached the containers"
for container in $(containers api) $(containers worker); do
    line=$(docker logs "$container" 2>&1 | head -n1 || true)
    [ "${line:0:1}" = "{" ] || { echo "FAIL: $container logs text, not JSON (AGENTDESK_LOG_FORMAT=json): $line"; exit 1; }
done
metrics=$(curl -sf "${auth[@]}" "$api/metrics" || true)
grep -qE '^agentdesk_runtime_threads 1(\.0)?$' <<<"$metrics" \
    || { echo "FAIL: agentdesk_runtime_threads is not 1 (AGENTDESK_RUNTIME_THREADS=1)"; exit 1; }
echo "JSON logs, 1 runtime thread"

echo "== a ticket to done, watched through the proxy"
curl -sN "${auth[@]}" --max-time 90 "$api/v1/events" >"$work/events" 2>/dev/null &
events_pid=$!
sleep 1
key=$(curl -sf "${auth[@]}" -X POST "$api/v1/tickets" -H 'content-type: application/json' -d '{"task": "say ok"}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
status=
for _ in $(seq 1 60); do
    status=$(curl -sf "${auth[@]}" "$api/v1/tickets/$key" | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"])')
    [ "$status" = done ] && break
    sleep 1
done
[ "$status" = done ] || { echo "FAIL: $key is $status, not done"; exit 1; }
echo "$key done"
# The worker's live text and the stored events, through the proxy to whichever api replica
# holds the stream, as they happened.
seen() {
    local events
    events=$(grep -F "\"$key\"" "$work/events" || true)
    grep -qF "\"kind\":\"$1\"" <<<"$events"
}
for _ in $(seq 1 20); do
    seen ticket.done && break
    sleep 0.5
done
for kind in text.delta ticket.done; do
    seen "$kind" || { echo "FAIL: the event stream through the proxy did not show $key's $kind"; cat "$work/events"; exit 1; }
done
kill "$events_pid" 2>/dev/null || true
events_pid=
echo "the stream through the proxy showed its live text and ticket.done"

echo "== an api replica stopped: the address still answers"
docker stop -t 30 "$(containers api | head -n1)" >/dev/null
for i in $(seq 1 20); do
    curl -sf -o /dev/null "${auth[@]}" "$api/v1/tickets/$key" || { echo "FAIL: request $i through the proxy failed with one api replica stopped"; exit 1; }
done
for i in $(seq 1 5); do
    curl -sf -o /dev/null "${auth[@]}" -X POST "$api/v1/tickets" -H 'content-type: application/json' -d '{"task": "say ok"}' \
        || { echo "FAIL: POST $i through the proxy failed with one api replica stopped"; exit 1; }
done
echo "20 GET and 5 POST answered"

echo "== stop the workers with a ticket in flight"
slow=$(curl -sf "${auth[@]}" -X POST "$api/v1/tickets" -H 'content-type: application/json' -d '{"task": "slow job"}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
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
