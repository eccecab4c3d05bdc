#!/usr/bin/env bash
# Runs the gather kernel tests under AddressSanitizer: the unit tests of kernel/src/gather/ and of the
# interpreter's gather operators (`cargo test --lib gather`) and the property tests
# (tests/gather_properties.rs), which drive the fast kernel at every SIMD level this CPU has
# against the scalar reference, with out-of-range and negative indices.
#
# Miri needs a nightly toolchain, so the out-of-bounds check here is ASan, enabled on stable
# with RUSTC_BOOTSTRAP=1. The standard library is not rebuilt, so only the crate's own code (and
# its dependencies) is instrumented. Where the toolchain ships no ASan runtime, the same tests run
# under valgrind instead (much slower).
#
#   bash scripts/sanitize.sh                 # both test sets
#   bash scripts/sanitize.sh -- NAME         # extra arguments go to the test binaries
#   SANITIZER=valgrind bash scripts/sanitize.sh   # valgrind even where ASan is available
#
# Builds into $CARGO_TARGET_DIR (default /work/asan-target, or ../asan-target beside the
# checkout), so the normal target directory is not rebuilt. Exits non-zero on any failure or
# sanitizer report.
set -euo pipefail

cd "$(dirname "$0")/.."
host=$(rustc -vV | sed -n 's/^host: //p')
sysroot=$(rustc --print sysroot)
if [[ -z "${CARGO_TARGET_DIR:-}" ]]; then
    if [[ -d /work ]]; then CARGO_TARGET_DIR=/work/asan-target; else CARGO_TARGET_DIR=../asan-target; fi
fi
export CARGO_TARGET_DIR
extra=()
if [[ "${1:-}" == "--" ]]; then
    shift
    extra=("$@")
fi

if [[ "${SANITIZER:-asan}" == asan ]] \
    && compgen -G "$sysroot/lib/rustlib/$host/lib/*rt.asan.a" > /dev/null; then
    echo "== AddressSanitizer ($host), target dir $CARGO_TARGET_DIR"
    export RUSTC_BOOTSTRAP=1
    # `--target` keeps build scripts and proc macros uninstrumented.
    export RUSTFLAGS="-Zsanitizer=address -Cforce-frame-pointers=yes"
    export RUSTDOCFLAGS="$RUSTFLAGS"
    export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1}"
    cargo test --target "$host" --lib -- gather "${extra[@]}"
    cargo test --target "$host" --test gather_properties -- "${extra[@]}"
else
    echo "== valgrind (no ASan runtime in $sysroot, or SANITIZER=valgrind)"
    command -v valgrind > /dev/null || { echo "valgrind is not installed" >&2; exit 2; }
    bins=$(cargo test --no-run --lib --test gather_properties --message-format=json \
        | grep -o '"executable":"[^"]*"' | sed 's/"executable":"//; s/"$//')
    for bin in $bins; do
        filter=()
        [[ "$bin" == */multigather[-_]* ]] && filter=(gather)
        valgrind --error-exitcode=1 --quiet "$bin" "${filter[@]}" "${extra[@]}"
    done
fi
echo "== sanitizer run clean"
