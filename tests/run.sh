#!/usr/bin/env bash
# The whole test suite: formatting, lints, the guest components' reproducibility,
# the plugins, and every test of the workspace. CI runs it from .ci/run, which
# first runs .ci/install and exports PLIMSOLL_DOCKER_TESTS=required and
# CARGO_INCREMENTAL=0; this script sets neither.
#
# Prerequisites (Debian packages, the wasm32-wasip2 target, dockerd with runsc, the
# sandbox image, chromium, the e2e virtualenv and bench peers) come from .ci/install.
# The toolchain ones (clang-19, llvm-ar-19, the wasm32-wasip2 target) are checked
# below, and a missing one stops here with the command that installs it; the rest
# are found by the tests themselves.
#
# Required mode comes from the environment: CI=true or PLIMSOLL_DOCKER_TESTS=required.
# In it, a missing docker engine, runtime, sandbox image, built plugin, chromium or
# bench peer fails the tests that need it. Without it, such a test skips what it
# cannot check and prints `SKIPPED <test>: <why> (...)` to stderr, which the test
# harness does not capture, so every skip shows in the output.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }
missing=()
for tool in clang-19 llvm-ar-19; do command -v "$tool" >/dev/null || missing+=("$tool"); done
rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2 || missing+=("the wasm32-wasip2 target")
if [ ${#missing[@]} -gt 0 ]; then
  echo "tests/run.sh: missing ${missing[*]}; run .ci/install (as root) first" >&2
  exit 1
fi

step "format (host workspace, guests, plugins)"
cargo fmt --all --check
cargo fmt --all --check --manifest-path guests/Cargo.toml
cargo fmt --all --check --manifest-path plugins/Cargo.toml
cargo fmt --all --check --manifest-path tests/fuzz/Cargo.toml

step "clippy (host workspace)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "clippy (the fuzz targets, tests/fuzz)"
cargo clippy --locked --all-targets --manifest-path tests/fuzz/Cargo.toml -- -D warnings

step "clippy (guests, wasm32-wasip2)"
(
  source guests/env.sh
  cargo clippy --locked --release --target wasm32-wasip2 --manifest-path guests/Cargo.toml \
    --target-dir "$target_dir" -- -D warnings
)

step "clippy and unit tests (plugins)"
cargo clippy --locked --release --target wasm32-wasip2 --manifest-path plugins/Cargo.toml -- -D warnings
cargo test --locked --manifest-path plugins/Cargo.toml

step "guest source unit tests (host-runnable modules)"
rustc --edition 2024 --test guests/quickjs/src/redeclare.rs -o target/guest-redeclare-tests
target/guest-redeclare-tests -q

step "the guest crates' own tests, on the host (libm against wasi-libc's vectors, the plants, the models' published checksums, jsnum against QuickJS's dtoa.c)"
cargo test --locked --manifest-path guests/Cargo.toml --workspace --exclude plimsoll-quickjs

step "the docker session interpreters' own tests (node --test)"
node --test runners/session/

step "guest components reproduce from their sources"
guests/check.sh

step "the CPython guest component (guests/python/python.wasm, built by componentize-py)"
guests/python/build.sh

step "provider plugins (plugins/out; the docker suite signs them with a throwaway key)"
plugins/build.sh

step "the vendor fakes the remote providers' suites start (tests/fakes)"
cargo build --locked -p plimsoll-fakes

step "tests"
cargo test --workspace --locked

step "fuzz targets, briefly (tests/fuzz/run.sh; each for 20 s from its committed corpus)"
tests/fuzz/run.sh 20
