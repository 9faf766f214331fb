#!/usr/bin/env bash
# Proves the committed guest components are what their sources build to: rebuilds
# every guest from a clean target directory into a scratch folder and compares
# SHA-256s with the files in the tree. A difference fails (and says how to fix it).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
GUESTS_TARGET_DIR="$scratch/target" GUESTS_OUT_DIR="$scratch/out" "$here/build.sh" >/dev/null
status=0
while IFS= read -r built; do
  rel=${built#"$scratch/out/"}
  want=$(sha256sum "$here/$rel" | cut -d' ' -f1)
  got=$(sha256sum "$built" | cut -d' ' -f1)
  if [ "$want" = "$got" ]; then
    echo "guests/$rel reproduces: sha256 $got"
  else
    echo "guests/$rel does not match its sources: committed $want, rebuilt $got" >&2
    echo "  run guests/build.sh and commit the result" >&2
    status=1
  fi
done < <(find "$scratch/out" -name '*.wasm' | sort)
exit $status
