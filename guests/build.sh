#!/usr/bin/env bash
# Builds the guest components for wasm32-wasip2 and copies each next to its
# sources (guests/<name>/<name>.wasm), printing its SHA-256: the component's identity.
#
# Needs Debian's clang-19, llvm-19 and wasi-libc (apt-get install clang-19 llvm-19
# lld-19 libclang-rt-19-dev-wasm32 wasi-libc) and `rustup target add wasm32-wasip2`.
# The build is reproducible: paths are remapped, so another checkout directory or
# CARGO_HOME gives the same bytes (`guests/check.sh` proves it in CI).
set -euo pipefail
source "$(dirname "$0")/env.sh"

echo "building guest components (release, wasm32-wasip2) into $target_dir" >&2
cargo build --release --locked --target wasm32-wasip2 \
  --manifest-path "$here/Cargo.toml" --target-dir "$target_dir"

mkdir -p "$out_dir/quickjs"
install -m 0644 "$target_dir/wasm32-wasip2/release/plimsoll_quickjs.wasm" "$out_dir/quickjs/quickjs.wasm"
(cd "$out_dir" && sha256sum quickjs/quickjs.wasm)
