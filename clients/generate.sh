#!/usr/bin/env bash
# Regenerates both clients' types from openapi/openapi.json (and the TypeScript client's dist/,
# which is committed so that `npm install ./clients/typescript` needs no build).
#   clients/generate.sh [OUT_DIR]   with OUT_DIR, writes the generated files there instead (the check's use)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
doc=$here/../openapi/openapi.json
out=${1:-}
py_out=${out:+$out/python/types.py}
ts_dir=$here/typescript

[ -z "$out" ] || mkdir -p "$out/python"
python3 "$here/python/scripts/generate_types.py" "$doc" "${py_out:-$here/python/src/agentdesk/types.py}"

cd "$ts_dir"
[ -x node_modules/.bin/openapi-typescript ] || npm ci --no-audit --no-fund --loglevel=error
if [ -n "$out" ]; then
    # A copy of the package with its fresh schema, built apart: the committed files stay untouched.
    mkdir -p "$out/typescript"
    cp -r package.json tsconfig.json src "$out/typescript/"
    node_modules/.bin/openapi-typescript "$doc" --output "$out/typescript/src/schema.ts" --silent
    node_modules/.bin/tsc -p "$out/typescript/tsconfig.json" --outDir "$out/typescript/dist"
else
    node_modules/.bin/openapi-typescript "$doc" --output src/schema.ts --silent
    rm -rf dist
    node_modules/.bin/tsc -p tsconfig.json
fi
