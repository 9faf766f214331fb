#!/usr/bin/env bash
# Runs a project's tests through a plimsoll daemon at the kernel tier (gVisor) and
# writes a signed receipt into OUT: receipt.jsonl (the signed run, its request and
# answer), bom.json (the run as a CycloneDX 1.6 BOM) and receipt.pub (the public half
# of a key made for this run alone; the private half is deleted before this exits).
#
#   receipt.sh PROJECT_DIR OUT_DIR STEP...
#
# Needs PLIMSOLL_DAEMON (the daemon's URL) and PLIMSOLL_CALLER_TOKEN; PLIMSOLL_HOST
# names the plimsoll-host binary (default: the one on PATH). Exits 0 when every step
# passed, 1 when a step failed (the receipt is written either way), 69 when the
# daemon refused before anything ran, 70 when the run may have happened unchecked.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
host=${PLIMSOLL_HOST:-plimsoll-host}
[ $# -ge 3 ] || { echo "usage: receipt.sh PROJECT_DIR OUT_DIR STEP..." >&2; exit 2; }
project=$1 out=$2
shift 2
: "${PLIMSOLL_DAEMON:?set PLIMSOLL_DAEMON to the daemon URL}"
: "${PLIMSOLL_CALLER_TOKEN:?set PLIMSOLL_CALLER_TOKEN to the caller token}"
mkdir -p "$out"
[ ! -e "$out/receipt.jsonl" ] || { echo "receipt.sh: $out already holds a receipt" >&2; exit 2; }

key_dir=$(mktemp -d)
trap 'rm -rf "$key_dir"' EXIT
python3 "$here/receipt.py" request "$project" "$@" > "$key_dir/request.json"
"$host" attest keygen --out "$key_dir/receipt.key" >&2
"$host" attest run --daemon "$PLIMSOLL_DAEMON" --key "$key_dir/receipt.key" --bundle "$out/receipt.jsonl" \
  "$key_dir/request.json" >&2
cp "$key_dir/receipt.key.pub" "$out/receipt.pub"
"$host" attest bom --pub "$out/receipt.pub" "$out/receipt.jsonl" -o "$out/bom.json"
"$host" attest verify --pub "$out/receipt.pub" "$out/receipt.jsonl"
python3 "$here/receipt.py" outcome "$out/receipt.jsonl"
