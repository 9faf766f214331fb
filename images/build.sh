#!/usr/bin/env bash
# Builds plimsoll's sandbox image from Debian packages: debootstrap a minimal
# bookworm root with python3, nodejs, and clang-19 with wasi-libc (C controllers
# compile to wasm32 in a run's first step), add the in-image programs from runners/
# (the resident session agent is a static binary from runners/agent) and the
# simulation judge (a static binary embedding wasmtime, the plants and QuickJS, with
# every component precompiled into /opt/plimsoll/sims), and `docker import` it. No registry is involved. Idempotent: the image carries its recipe
# digest as a label, and an image with the same digest is reused.
#
# Writes the image's content ID to images/out/sandbox.id (the daemon runs images by
# ID only: SANDBOX_DOCKER_IMAGE=$(cat images/out/sandbox.id)). Run as root.
#
#   images/build.sh            build (or reuse) the image
#   images/build.sh --digest   print the recipe digest and exit
set -euo pipefail
cd "$(dirname "$0")/.."

suite=bookworm
packages=python3,nodejs,clang-19,lld-19,wasi-libc,libclang-rt-19-dev-wasm32
name=plimsoll-sandbox
out=images/out
say() { printf '[images] %s\n' "$*" >&2; }

# The judge: built with the whole workspace (so the test suite reuses every
# dependency), then only its final link again with a static C library, so it runs
# in the image whatever the image's libraries are.
judge=$out/plimsoll-judge
# The resident session agent (runners/agent), linked the same way.
agent=$out/plimsoll-agent
build_judge() {
  command -v cargo >/dev/null || { echo "images/build.sh: cargo is missing (the judge is built from runners/judge)" >&2; exit 1; }
  mkdir -p "$out"
  say "plimsoll-judge: building (debug profile, dependencies optimised; shared with the test suite)"
  cargo build -q --locked --workspace --all-targets
  cargo rustc -q --locked -p plimsoll-judge --bin plimsoll-judge -- -C target-feature=+crt-static
  install -m 0755 "${CARGO_TARGET_DIR:-target}/debug/plimsoll-judge" "$judge.tmp"
  strip --strip-debug "$judge.tmp"
  mv "$judge.tmp" "$judge"
  say "plimsoll-agent: linking statically"
  cargo rustc -q --locked -p plimsoll-agent --bin plimsoll-agent -- -C target-feature=+crt-static
  install -m 0755 "${CARGO_TARGET_DIR:-target}/debug/plimsoll-agent" "$agent.tmp"
  strip "$agent.tmp"
  mv "$agent.tmp" "$agent"
}

# The recipe: everything that decides the image's bytes except the archive itself.
recipe_digest() {
  {
    printf 'suite=%s\npackages=%s\n' "$suite" "$packages"
    sha256sum images/build.sh runners/project/runner.py runners/probe/probe.py \
      runners/session/cell.py runners/session/cell.js "$judge" "$agent"
  } | sha256sum | cut -d' ' -f1
}
build_judge
digest=$(recipe_digest)
if [ "${1:-}" = --digest ]; then echo "$digest"; exit 0; fi

command -v docker >/dev/null || { echo "images/build.sh: docker is not installed (apt-get install docker.io)" >&2; exit 1; }
docker info >/dev/null 2>&1 || { echo "images/build.sh: the docker engine is not running (start dockerd)" >&2; exit 1; }
mkdir -p "$out"

existing=$(docker images -q --no-trunc --filter "label=dev.plimsoll.recipe=$digest" | head -n1)
if [ -n "$existing" ]; then
  say "$name: recipe $digest unchanged, reusing $existing"
  echo "$existing" > "$out/sandbox.id"
  echo "$existing"
  exit 0
fi

command -v debootstrap >/dev/null || { echo "images/build.sh: debootstrap is not installed (apt-get install debootstrap)" >&2; exit 1; }
# The machine's own configured Debian archive (deb822 or one-line format).
mirror=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -n1 || true)
if [ -z "$mirror" ]; then
  mirror=$(awk '$1 == "deb" && $0 !~ /security/ { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; exit } }' /etc/apt/sources.list 2>/dev/null || true)
fi
[ -n "$mirror" ] || { echo "images/build.sh: no Debian archive found in the apt sources" >&2; exit 1; }

started=$(date +%s)
root=$(mktemp -d /var/tmp/plimsoll-rootfs.XXXXXX)
trap 'rm -rf "$root"' EXIT
say "$name: debootstrap $suite ($packages), about a minute"
debootstrap --variant=minbase --include="$packages" "$suite" "$root" "$mirror" >"$root.log" 2>&1 || {
  tail -n 30 "$root.log" >&2; rm -f "$root.log"; exit 1; }
rm -f "$root.log"

say "$name: installing the runners"
install -d -m 0755 "$root/opt/plimsoll"
# The engine copies the mount point's mode onto the tmpfs: /work is world-writable
# and sticky, like /tmp, so the guest uid (which owns nothing in the image) can use it.
install -d -m 1777 "$root/work"
install -m 0755 runners/project/runner.py "$root/opt/plimsoll/runner.py"
install -m 0755 runners/probe/probe.py "$root/opt/plimsoll/probe.py"
install -m 0755 "$agent" "$root/opt/plimsoll/plimsoll-agent"
install -m 0644 runners/session/cell.py runners/session/cell.js "$root/opt/plimsoll/"
install -m 0755 "$judge" "$root/usr/local/bin/plimsoll-judge"
# Every component the judge runs, compiled now by the judge itself (the same
# engine settings), so a run in the image starts without compiling anything.
"$judge" precompile "$root/opt/plimsoll/sims" >/dev/null
chmod -R a+rX "$root/opt/plimsoll/sims"
# The C controllers' compiler under its plain name; Debian's clang-19 finds
# wasi-libc for --target=wasm32-wasi by itself.
ln -sfn /usr/bin/clang-19 "$root/usr/local/bin/clang"
# No set-uid or set-gid file: no_new_privs already defeats them; defence in depth.
find "$root" -xdev -type f -perm /6000 -exec chmod ug-s {} +
# The host binds its own resolver file; the image's copy must not matter.
: > "$root/etc/resolv.conf"
rm -rf "$root/var/cache/apt/archives"/*.deb "$root/var/lib/apt/lists"/* "$root/usr/share/doc" "$root/usr/share/man"

say "$name: docker import"
id=$(tar -C "$root" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change "LABEL dev.plimsoll.recipe=$digest" \
  --change 'WORKDIR /work' - "$name:$digest")
echo "$id" > "$out/sandbox.id"
say "$name: built $id in $(( $(date +%s) - started )) s"
echo "$id"
