#!/usr/bin/env bash
# Builds the plugins (providers and signers) for wasm32-wasip2 and lays each out as the host loads
# it: <out>/<name>/{plugin.toml, <name>.wasm}. Signing is a separate step
# (`plimsoll-host plugin sign`), done with the operator's key.
#
#   plugins/build.sh [OUT_DIR]     default: plugins/out
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/out}
target=${PLUGINS_TARGET_DIR:-$here/target}
rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2 || {
  echo "plugins/build.sh: the wasm32-wasip2 target is missing (rustup target add wasm32-wasip2)" >&2; exit 1; }
cargo build --release --locked --target wasm32-wasip2 --manifest-path "$here/Cargo.toml" --target-dir "$target" >&2
for name in agentsandbox docker dockercloud e2b inventory-broker kms-signer openshell; do
  mkdir -p "$out/$name"
  install -m 0644 "$here/$name/plugin.toml" "$out/$name/plugin.toml"
  install -m 0644 "$target/wasm32-wasip2/release/plimsoll_plugin_${name//-/_}.wasm" "$out/$name/$name.wasm"
  (cd "$out" && sha256sum "$name/$name.wasm") >&2
done
