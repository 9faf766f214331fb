# Sourced by build.sh and tests/run.sh: the environment that builds the guest
# components for wasm32-wasip2 with Debian's clang, reproducibly.
# shellcheck shell=bash
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
cargo_home=${CARGO_HOME:-$HOME/.cargo}
rustup_home=${RUSTUP_HOME:-$HOME/.rustup}
target_dir=${GUESTS_TARGET_DIR:-$here/target}
out_dir=${GUESTS_OUT_DIR:-$here}

for tool in clang-19 llvm-ar-19; do
  command -v "$tool" >/dev/null || { echo "guests/build.sh: $tool is missing: apt-get install clang-19 llvm-19 wasi-libc" >&2; return 1; }
done
[ -d /usr/include/wasm32-wasi ] || { echo "guests/build.sh: Debian's wasi-libc is missing: apt-get install wasi-libc" >&2; return 1; }

# clang needs a sysroot; without one it falls back to the host's glibc headers.
sysroot="$target_dir/wasi-sysroot"
mkdir -p "$sysroot/lib"
ln -sfn /usr/include/wasm32-wasi "$sysroot/include"
ln -sfn /usr/lib/wasm32-wasi "$sysroot/lib/wasm32-wasi"

# rquickjs-sys would otherwise download wasi-sdk; Debian's clang does the job.
export RQUICKJS_SYS_NO_WASI_SDK=1
export CC_wasm32_wasip2=clang-19
export AR_wasm32_wasip2=llvm-ar-19
maps="-ffile-prefix-map=$cargo_home=/cargo -ffile-prefix-map=$target_dir=/target -ffile-prefix-map=$root=/src"
export CFLAGS_wasm32_wasip2="--sysroot=$sysroot $maps"
export CARGO_ENCODED_RUSTFLAGS=$(printf '%s\x1f' \
  "--remap-path-prefix=$cargo_home=/cargo" \
  "--remap-path-prefix=$rustup_home=/rustup" \
  "--remap-path-prefix=$target_dir=/target" \
  "--remap-path-prefix=$root=/src" | sed 's/\x1f$//')
export SOURCE_DATE_EPOCH=0

