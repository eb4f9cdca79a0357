#!/usr/bin/env bash
# The official Python clients of the protocols the desk speaks, for tests/protocol_clients.rs: the
# MCP Python SDK and the A2A SDK (protocol v1.0), pinned, in a cached virtualenv.
#
# Sourced by .ci/run, which calls protocol_clients_setup (exports AGENTDESK_CLIENTS_PYTHON). Run
# directly, it sets up and prints the interpreter's path, for running
# `AGENTDESK_CLIENTS_PYTHON=… cargo test --test protocol_clients` by hand.
#
# The venv lives under $AGENTDESK_CI_CACHE (default ~/.cache/agentdesk-ci), named after a hash of
# the pins; a stamp file inside records them, so a changed pin builds a new one.

PROTOCOL_CLIENTS_PINS="mcp==2.3.0 a2a-sdk==1.3.0 httpx==0.28.1"
PROTOCOL_CLIENTS_CACHE=${AGENTDESK_CI_CACHE:-${HOME:-/root}/.cache/agentdesk-ci}

protocol_clients_setup() {
    local hash venv python candidate
    hash=$(printf '%s' "$PROTOCOL_CLIENTS_PINS" | sha256sum | cut -c1-12)
    venv=$PROTOCOL_CLIENTS_CACHE/venv-clients-$hash
    if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.agentdesk-pins" 2>/dev/null)" != "$PROTOCOL_CLIENTS_PINS" ]; then
        # Both SDKs need Python 3.10 or newer.
        python=
        for candidate in python3 python3.13 python3.12 python3.11 python3.10; do
            if command -v "$candidate" >/dev/null 2>&1 \
                && "$candidate" -c 'import sys, venv; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
                python=$candidate
                break
            fi
        done
        [ -n "$python" ] || {
            echo "error: no python3 (3.10 or newer, with venv) for the protocol clients" >&2
            return 1
        }
        echo "Creating $venv ($PROTOCOL_CLIENTS_PINS) with $($python --version 2>&1)" >&2
        rm -rf "$venv"
        mkdir -p "$PROTOCOL_CLIENTS_CACHE"
        "$python" -m venv "$venv" || return 1
        # shellcheck disable=SC2086 # the pins are a word list
        PIP_CACHE_DIR=$PROTOCOL_CLIENTS_CACHE/pip "$venv/bin/python" -m pip install \
            --quiet --disable-pip-version-check --progress-bar off $PROTOCOL_CLIENTS_PINS || return 1
        echo "$PROTOCOL_CLIENTS_PINS" >"$venv/.agentdesk-pins"
    fi
    export AGENTDESK_CLIENTS_PYTHON=$venv/bin/python
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -euo pipefail
    protocol_clients_setup
    echo "$AGENTDESK_CLIENTS_PYTHON"
fi
