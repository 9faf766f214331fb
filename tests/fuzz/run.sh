#!/usr/bin/env bash
# Runs every fuzz target (or the ones named) for SECONDS each, default 60, seeded
# from the committed corpora in tests/fuzz/corpus. New inputs go to a scratch
# directory, so the committed corpora change only when asked (KEEP=1 adds what the
# run found, minimised). A crash leaves its reproducer in tests/fuzz/artifacts and
# fails the script. Needs cargo-fuzz (.ci/install installs it); runs on the
# stable toolchain (RUSTC_BOOTSTRAP lets cargo-fuzz pass its -Z flags).
#
#   tests/fuzz/run.sh [SECONDS] [TARGET...]
#   cargo fuzz run --fuzz-dir tests/fuzz -O -a TARGET tests/fuzz/artifacts/TARGET/crash-...   # replay one
set -euo pipefail
cd "$(dirname "$0")/../.."
export RUSTC_BOOTSTRAP=1
seconds=${1:-60}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo fuzz list --fuzz-dir tests/fuzz)
fi
command -v cargo-fuzz >/dev/null || { echo "tests/fuzz/run.sh: cargo-fuzz is missing; run .ci/install (or cargo install cargo-fuzz --locked)" >&2; exit 1; }

# Release with overflow checks and debug assertions; built once for all targets.
cargo fuzz build --fuzz-dir tests/fuzz -O -a

failed=()
for t in "${targets[@]}"; do
  scratch=$(mktemp -d)
  printf '\n== fuzz %s for %s s\n' "$t" "$seconds"
  log="$scratch.log"
  status=0
  cargo fuzz run --fuzz-dir tests/fuzz -O -a "$t" "$scratch" "tests/fuzz/corpus/$t" -- \
    -max_total_time="$seconds" -print_final_stats=1 >"$log" 2>&1 || status=$?
  # The run's summary, or on a failure its whole report.
  if [ "$status" -ne 0 ]; then
    tail -n 60 "$log"
    failed+=("$t")
    echo "fuzz $t FAILED (exit $status); reproducer under tests/fuzz/artifacts/$t" >&2
  else
    grep -E '^(Done [0-9]+ runs|stat::number_of_executed_units|stat::peak_rss_mb|stat::new_units_added)' "$log" || true
    grep -E '#[0-9]+ +DONE' "$log" | tail -n 1 || true
    if [ "${KEEP:-0}" = 1 ]; then
      cp -n "$scratch"/* "tests/fuzz/corpus/$t"/ 2>/dev/null || true
      cargo fuzz cmin --fuzz-dir tests/fuzz -O -a "$t" "tests/fuzz/corpus/$t" >/dev/null 2>&1
    fi
  fi
  rm -f "$log"
  rm -rf "$scratch"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz targets that failed: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} targets ran ${seconds} s each, nothing found"
