#!/usr/bin/env bash
# What 10 000 enabled schedules that fire rarely cost an idle desk: one `agentdesk serve` with no
# schedule, then the same with 10 000 yearly ones, each measured for WINDOW seconds after a
# warm-up, side by side in one run. Reports the process's CPU (from /proc) and the database's
# transactions per second (pg_stat_database; every statement the desk sends runs in one).
#
#   DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres bash bench/idle_schedules.sh [BIN]
#
# BIN defaults to target/release/agentdesk, else target/debug/agentdesk.
set -euo pipefail

BIN=${1:-}
if [ -z "$BIN" ]; then
    BIN=target/release/agentdesk
    [ -x "$BIN" ] || BIN=target/debug/agentdesk
fi
WINDOW=${WINDOW:-60}
WARMUP=${WARMUP:-10}
COUNT=${COUNT:-10000}
BASE=${DATABASE_URL%/*}
DB=agentdesk_idle_schedules
TICK=$(getconf CLK_TCK)

psql_db() { psql "$BASE/$DB" -Atqc "$1"; }

run() {
    local schedules=$1
    psql "$DATABASE_URL" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB"
    local port
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    env -i PATH="$PATH" DATABASE_URL="$BASE/$DB" AGENTDESK_ADDR="127.0.0.1:$port" RUST_LOG=warn \
        "$BIN" serve >/dev/null 2>&1 &
    local pid=$!
    for _ in $(seq 1 100); do
        curl -fs "http://127.0.0.1:$port/readyz" >/dev/null && break
        sleep 0.2
    done
    if [ "$schedules" -gt 0 ]; then
        curl -fs -X POST "http://127.0.0.1:$port/v1/schedules" -H 'content-type: application/json' \
            -d '{"cron": "0 3 1 1 *", "ticket": {"task": "yearly"}}' >/dev/null
        # Copies of that one, straight into the table: the scheduler sees them at its next look.
        psql_db "INSERT INTO schedules (id, cron, timezone, ticket, overlap, catch_up, catch_up_window_secs, next_run_at)
                 SELECT gen_random_uuid(), cron, timezone, ticket, overlap, catch_up, catch_up_window_secs, next_run_at
                 FROM schedules, generate_series(3, $schedules)" >/dev/null
        curl -fs -X POST "http://127.0.0.1:$port/v1/schedules" -H 'content-type: application/json' \
            -d '{"cron": "0 4 1 1 *", "ticket": {"task": "wakes the schedulers"}}' >/dev/null
    fi
    sleep "$WARMUP"
    local cpu0 tx0 cpu1 tx1
    cpu0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    tx0=$(psql_db "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = '$DB'")
    sleep "$WINDOW"
    cpu1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    tx1=$(psql_db "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = '$DB'")
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    local enabled
    enabled=$(psql_db "SELECT count(*) FROM schedules WHERE enabled" 2>/dev/null || echo 0)
    python3 - "$schedules" "$enabled" "$cpu0" "$cpu1" "$tx0" "$tx1" "$TICK" "$WINDOW" <<'EOF'
import sys
n, enabled, c0, c1, t0, t1, tick, window = sys.argv[1:]
cpu_ms = (int(c1) - int(c0)) * 1000 / int(tick) / float(window)
tps = (int(t1) - int(t0)) / float(window)
print(f"{n:>6} schedules ({enabled} enabled): agentdesk CPU {cpu_ms:.1f} ms/s, database {tps:.2f} transactions/s")
EOF
}

echo "binary: $BIN; window ${WINDOW} s after ${WARMUP} s"
run 0
run "$COUNT"
psql "$DATABASE_URL" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)"
