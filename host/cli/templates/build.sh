#!/usr/bin/env bash
# Builds the {{name}} plugin for wasm32-wasip2 and lays it out as the host
# loads it: plugin.toml beside {{name}}.wasm. Sign it next:
#   plimsoll-host plugin sign --key KEY.key .
set -euo pipefail
cd "$(dirname "$0")"
rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2 || {
  echo "build.sh: the wasm32-wasip2 target is missing (rustup target add wasm32-wasip2)" >&2; exit 1; }
cargo build --release --target wasm32-wasip2
install -m 0644 "${CARGO_TARGET_DIR:-target}/wasm32-wasip2/release/plimsoll_plugin_{{crate}}.wasm" {{name}}.wasm
sha256sum {{name}}.wasm
