#!/bin/sh
# Creates a stub source file for every target Cargo.toml declares, plus
# src/main.rs and src/lib.rs, so that the dependency layer of the image can be
# built from Cargo.toml and Cargo.lock alone. Prints the stub paths, which the
# Dockerfile removes again before copying the real sources.
set -eu
manifest=${1:-Cargo.toml}
{
    echo src/main.rs
    echo src/lib.rs
    awk '
        function val(s) {
            sub(/^[^=]*=[ \t]*"/, "", s)
            sub(/".*/, "", s)
            return s
        }
        function flush() {
            if (sect == "[lib]") print (path != "" ? path : "src/lib.rs")
            else if (sect == "[[bin]]") print (path != "" ? path : "src/bin/" name ".rs")
            else if (sect == "[[test]]") print (path != "" ? path : "tests/" name ".rs")
            else if (sect == "[[bench]]") print (path != "" ? path : "benches/" name ".rs")
            else if (sect == "[[example]]") print (path != "" ? path : "examples/" name ".rs")
            name = ""
            path = ""
        }
        /^[ \t]*\[/ { flush(); sect = $1; next }
        /^[ \t]*name[ \t]*=/ { name = val($0) }
        /^[ \t]*path[ \t]*=/ { path = val($0) }
        END { flush() }
    ' "$manifest"
} | sort -u | while read -r path; do
    mkdir -p "$(dirname "$path")"
    # One body that compiles as a library, a binary, a test or a bench.
    printf '#![allow(dead_code)]\nfn main() {}\n' > "$path"
    echo "$path"
done
