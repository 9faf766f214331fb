#!/usr/bin/env bash
# Verifies a pull-request receipt against the tree it claims to be about.
#
#   verify.sh RECEIPT_DIR PROJECT_DIR [--key-id ID] STEP...
#
# Checks, in order: every signature, stored exchange and link of receipt.jsonl under
# receipt.pub (and, with --key-id, that receipt.pub is the key the CI log printed);
# that bom.json is exactly the BOM the bundle gives; that the signed request is the
# one PROJECT_DIR's files and STEPs give, at the kernel floor; and that every step
# passed at the kernel tier or above. Exits 0 only when all hold.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
host=${PLIMSOLL_HOST:-plimsoll-host}
[ $# -ge 3 ] || { echo "usage: verify.sh RECEIPT_DIR PROJECT_DIR [--key-id ID] STEP..." >&2; exit 2; }
receipt=$1 project=$2
shift 2
key_id=
if [ "${1:-}" = --key-id ]; then key_id=$2; shift 2; fi
verified=$("$host" attest verify --pub "$receipt/receipt.pub" "$receipt/receipt.jsonl")
echo "$verified"
if [ -n "$key_id" ] && [[ $verified != *"signed by key $key_id,"* ]]; then
  echo "verify.sh: the receipt is not signed by key $key_id" >&2
  exit 1
fi
"$host" attest bom --pub "$receipt/receipt.pub" --check "$receipt/receipt.jsonl" "$receipt/bom.json"
python3 "$here/receipt.py" matches "$receipt/receipt.jsonl" "$project" "$@"
python3 "$here/receipt.py" outcome "$receipt/receipt.jsonl"
echo "receipt verified: this tree's steps passed, signed at the tier above"
