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

# The simulation guests: each plant and model crate (plimsoll-plant-NAME,
# plimsoll-model-NAME) becomes guests/sims/NAME/NAME.wasm, each controller crate
# (plimsoll-controller-NAME) guests/sims/controllers/NAME/NAME.wasm. They import
# nothing and need no pre-initialisation.
release="$target_dir/wasm32-wasip2/release"
for built in "$release"/plimsoll_plant_*.wasm "$release"/plimsoll_model_*.wasm "$release"/plimsoll_controller_*.wasm; do
  [ -f "$built" ] || continue
  file=${built##*/plimsoll_}
  case $file in
    controller_*) name=${file#controller_}; name=${name%.wasm}; dest="sims/controllers/$name/$name.wasm" ;;
    *) name=${file#*_}; name=${name%.wasm}; dest="sims/$name/$name.wasm" ;;
  esac
  install -D -m 0644 "$built" "$out_dir/$dest"
  (cd "$out_dir" && sha256sum "$dest")
done

# Pre-initialisation: plimsoll-preinit (a host tool, built in the host workspace with
# the host's flags, so none of the guest settings above) runs the component's
# `prepare` with fixed clocks and random streams and snapshots it: a fresh run starts
# with the context and prelude ready, and the snapshot is the same on every build.
# The tool is built with the whole workspace and all its targets, so its wasmtime is
# the one the test suite uses (one build, not two with different features).
echo "pre-initialising the QuickJS component (plimsoll-preinit; builds the host workspace)" >&2
mkdir -p "$out_dir/quickjs"
host_env=(env -u CARGO_ENCODED_RUSTFLAGS -u CFLAGS_wasm32_wasip2 -u CC_wasm32_wasip2 -u AR_wasm32_wasip2
  -u RQUICKJS_SYS_NO_WASI_SDK -u SOURCE_DATE_EPOCH)
"${host_env[@]}" cargo build -q --locked --manifest-path "$root/Cargo.toml" --workspace --all-targets
"${host_env[@]}" "${CARGO_TARGET_DIR:-$root/target}/debug/plimsoll-preinit" \
  "$target_dir/wasm32-wasip2/release/plimsoll_quickjs.wasm" "$out_dir/quickjs/quickjs.wasm.tmp"
mv "$out_dir/quickjs/quickjs.wasm.tmp" "$out_dir/quickjs/quickjs.wasm"
chmod 0644 "$out_dir/quickjs/quickjs.wasm"
(cd "$out_dir" && sha256sum quickjs/quickjs.wasm)
