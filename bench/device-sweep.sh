#!/bin/bash
# The 16-core sweep of BENCHMARKS.md: `agentdesk-bench throughput --child` on a bigger machine,
# run through the device bundle (../shared/device: `cargo build --release`, then
# `bash ../shared/device/make-bundle.sh`), at several sizes in one session:
#
#   bash bench/device-sweep.sh        # from the checkout's root on the device; results in $OUT
#
# Each run is a whole `devbundle/run.sh` (its own PostgreSQL, fsync on) of the throughput scenario
# with shorter pgbench runs (--pg-seconds), so that eight fit in one ten-minute call:
#   c16, c16 with the build before (devbundle/agentdesk-base.xz, a stripped binary added to the
#   bundle by hand, when it has one), c8, c4,
#   c2 (the whole run pinned with taskset: agentdesk, the bench and PostgreSQL share the cores),
#   then c16 with AGENTDESK_RUNTIME_THREADS at 8 and 4.
# SWEEP=stages runs instead the set that asks where a 16-core desk queues: c16 with its default
# claimers (4 there) and with AGENTDESK_CLAIMERS=1, the claim_backlog scenario, c8, c2, and c16
# with the build before when the bundle has one.
# Every run's summary.txt has tickets/s, the ratio to pgbench and agentdesk's CPU per ticket, and
# its run.log each round's stages (POST latency, the batched stages' load, what Postgres's sessions
# waited on); sweep.txt gathers their main lines.
set -u
OUT=${OUT:-$PWD/devbundle-out}
PG_SECONDS=${PG_SECONDS:-4}
RUN_S=${RUN_S:-66}
T0=$(date +%s)
TOTAL_S=${TOTAL_S:-570}
CORES=$(nproc)
mkdir -p "$OUT"

# name, cores (0: all), settings for the child ("NAME=VALUE ...", e.g. AGENTDESK_RUNTIME_THREADS=8
# or AGENTDESK_CLAIMERS=1; "": the defaults), agentdesk binary ("": the bundle's), more bench
# arguments, scenario (default throughput)
run() {
  local name=$1 cores=$2 settings=$3 program=$4 more=${5:-} scenario=${6:-throughput} pin=()
  local left=$(( T0 + TOTAL_S - $(date +%s) ))
  if [ "$left" -lt 45 ]; then
    echo "== $name: skipped, $left s left" | tee -a "$OUT/sweep.txt"
    return
  fi
  [ "$cores" -gt 0 ] && [ "$cores" -lt "$CORES" ] && pin=(taskset -c "0-$((cores - 1))")
  local extra=""
  [ "$scenario" = throughput ] && extra="--pg-seconds $PG_SECONDS"
  [ -n "$program" ] && extra="$extra --agentdesk $program"
  [ -n "$more" ] && extra="$extra $more"
  echo "== $name: $scenario, ${pin[*]:-all $CORES cores} ${settings:-default settings} $extra ($left s left)" | tee -a "$OUT/sweep.txt"
  # shellcheck disable=SC2086 # the settings are words on purpose
  env OUT="$OUT/$name" SCENARIOS="$scenario" TOTAL_S=$(( left < RUN_S ? left : RUN_S )) FINAL_RESERVE=8 \
    BENCH_EXTRA_ARGS="$extra" $settings \
    "${pin[@]}" bash devbundle/run.sh > "$OUT/$name.log" 2>&1
  grep -E "agentdesk / pgbench tickets/s|process CPU per ticket|Postgres CPU per ticket|round [0-9]:|stages [0-9]:|pgbench [0-9]:|claimed per second" \
    "$OUT/$name/run.log" 2>/dev/null | sed 's/^/   /' | tee -a "$OUT/sweep.txt"
}

# The build to compare with travels compressed (the bundle's size is limited), and is unpacked
# outside the checkout.
BASE=""
if [ -f devbundle/agentdesk-base.xz ] && xz -dc devbundle/agentdesk-base.xz > /tmp/agentdesk-base; then
  chmod +x /tmp/agentdesk-base && BASE=/tmp/agentdesk-base
fi
case "${SWEEP:-scaling}" in
  stages)
    run c16 0 "" ""
    run c16-claimers1 0 "AGENTDESK_CLAIMERS=1" ""
    run c16-backlog 0 "" "" "" claim_backlog
    run c8 8 "" ""
    run c2 2 "" ""
    [ -n "$BASE" ] && run c16-base 0 "" "$BASE"
    ;;
  *)
    run c16 0 "" ""
    [ -n "$BASE" ] && run c16-base 0 "" "$BASE"
    run c8 8 "" ""
    run c4 4 "" ""
    run c2 2 "" ""
    run c16-t8 0 "AGENTDESK_RUNTIME_THREADS=8" ""
    run c16-t4 0 "AGENTDESK_RUNTIME_THREADS=4" ""
    ;;
esac
echo "== sweep done in $(( $(date +%s) - T0 )) s" | tee -a "$OUT/sweep.txt"
