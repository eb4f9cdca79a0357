#!/usr/bin/env bash
# Fails when the clients' generated files (types and the TypeScript dist/) differ from what
# openapi/openapi.json and the sources give: run clients/generate.sh and commit the result.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$here/generate.sh" "$tmp"
status=0
diff -u "$here/python/src/agentdesk/types.py" "$tmp/python/types.py" || status=1
diff -u "$here/typescript/src/schema.ts" "$tmp/typescript/src/schema.ts" || status=1
diff -ru "$here/typescript/dist" "$tmp/typescript/dist" || status=1
if [ "$status" -ne 0 ]; then
    echo "error: the clients' generated files are out of date: run clients/generate.sh and commit them" >&2
    exit 1
fi
echo "The clients' generated files match openapi/openapi.json"
