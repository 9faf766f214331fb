#!/usr/bin/env bash
# Builds the CPython guest component with componentize-py (pinned below) into
# guests/python/python.wasm and prints its SHA-256, the component's identity
# (`cpython-wasm:sha256:<hex>`).
#
# componentize-py comes from PyPI into a virtualenv under guests/target (made
# once). The build is not bit-reproducible: componentize-py snapshots a live
# interpreter, whose hash seeds and heap layout differ per build, so each build has
# its own identity. That is why the file is a build output, not checked in.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
version=0.25.1
venv=${PLIMSOLL_COMPONENTIZE_VENV:-$root/guests/target/componentize-py-$version}
export PYTHONDONTWRITEBYTECODE=1

if ! "$venv/bin/componentize-py" --version 2>/dev/null | grep -qx "componentize-py $version"; then
  echo "installing componentize-py $version into $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "componentize-py==$version"
fi

echo "building the CPython guest component into $here/python.wasm" >&2
cd "$here"
# runners/host-api holds plimsoll_host, the grant's client, which the guest carries built in.
"$venv/bin/componentize-py" -d "$root/wit/engine" -w python-engine componentize app -p . -p "$root/runners/host-api" \
  -o python.wasm.tmp >&2
mv python.wasm.tmp python.wasm
sha256sum python.wasm
