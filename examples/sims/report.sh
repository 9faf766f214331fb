#!/usr/bin/env bash
# Judges every plant's accepted and draft controller on the embedded default and writes
# the replay page for all of them: examples/sims/index.html (or the path given).
# Usage: examples/sims/report.sh [PAGE.html]
set -euo pipefail
cd "$(dirname "$0")/../.."
page=${1:-examples/sims/index.html}
runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT
cargo build -q -p plimsoll-host
host=target/debug/plimsoll-host
saved=()
for plant in cartpole cartpole-swingup shower ship buck blackhole rocket satclock slits; do
  for which in accepted draft; do
    out="$runs/$plant-$which.json"
    # A draft fails its task but completes: the judge exits 0 and the summary says why.
    "$host" sim run --plant "$plant" --controller "examples/sims/$plant/$which.js" --save "$out" >/dev/null
    saved+=("$out")
  done
done
"$host" sim report "${saved[@]}" -o "$page" --title "plimsoll simulation runs: nine plants, accepted and draft"
