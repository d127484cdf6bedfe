#!/usr/bin/env bash
# Measures how many simulator seeds it takes to find each planted bug
# (issue 28, "Measure"); see .ci/plants/README.md. Not run by CI: slow.
#
# Usage: .ci/plants/measure.sh [plant ...]
#   plant: a patch's name without .patch (e.g. stale-hw-committed); all
#   of .ci/plants/*.patch when none is named.
# Environment:
#   PLANTS_BASE        commit the patches are applied to (default HEAD)
#   PLANTS_SEEDS       seeds to try per plant (default 3000, from seed 0)
#   PLANTS_TARGET_DIR  the cargo target dir shared by every plant's build
#                      (default ${TMPDIR:-/tmp}/isrlog-plants-target)
#   PLANTS_KEEP_TARGET=1  keep that target dir afterwards (default: removed)
#
# For each plant: applies its patch to a scratch worktree (git worktree add
# --detach, reset between plants), builds the release test binary with
# debug assertions and overflow checks, runs
#   ISRLOG_SIM_FIRST_SEED=0 ISRLOG_SIM_SEEDS=$PLANTS_SEEDS ISRLOG_SIM_THREADS=1 \
#     <test binary> testing::sim::run::tests::simulated_runs --nocapture
# (which stops at the first failing seed) and prints a row: the plant, the
# seeds needed (first failing seed + 1, or "not found in N"), the failure's
# first line, and how long the build and the run took. A patch that no
# longer applies, or a build that fails, stops the script with status 2.
set -euo pipefail

plants_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(git -C "$plants_dir" rev-parse --show-toplevel)
base=$(git -C "$repo" rev-parse --verify "${PLANTS_BASE:-HEAD}^{commit}")
seeds=${PLANTS_SEEDS:-3000}
target_dir=${PLANTS_TARGET_DIR:-${TMPDIR:-/tmp}/isrlog-plants-target}
keep_target=${PLANTS_KEEP_TARGET:-0}

# Seconds since $1 (an $EPOCHREALTIME), to a tenth.
seconds_since() {
    awk -v start="$1" -v now="$EPOCHREALTIME" 'BEGIN { printf "%.1f", now - start }'
}

die() {
    printf 'measure.sh: %s\n' "$*" >&2
    exit 2
}

if (($# > 0)); then
    plants=("$@")
else
    plants=()
    for patch in "$plants_dir"/*.patch; do
        [[ -e $patch ]] || die "no patches in $plants_dir"
        name=${patch##*/}
        plants+=("${name%.patch}")
    done
fi
for plant in "${plants[@]}"; do
    [[ -f $plants_dir/$plant.patch ]] || die "no such plant: $plants_dir/$plant.patch"
done

scratch=$(mktemp -d "${TMPDIR:-/tmp}/isrlog-plants-worktree.XXXXXX")
logs=$(mktemp -d "${TMPDIR:-/tmp}/isrlog-plants-logs.XXXXXX")
cleanup() {
    git -C "$repo" worktree remove --force "$scratch" 2>/dev/null || true
    rm -rf "$scratch"
    git -C "$repo" worktree prune
    if [[ $keep_target == 1 ]]; then
        printf 'target dir kept: %s\n' "$target_dir" >&2
    else
        rm -rf "$target_dir"
        printf 'target dir removed: %s (PLANTS_KEEP_TARGET=1 keeps it)\n' "$target_dir" >&2
    fi
    printf 'build and run logs: %s\n' "$logs" >&2
}
trap cleanup EXIT

printf 'base %s, %s seeds per plant, target dir %s\n' "$(git -C "$repo" log -1 --format='%h %s' "$base" | cut -c1-80)" "$seeds" "$target_dir" >&2
# The scratch directory exists (mktemp), so the worktree goes inside it.
worktree=$scratch/isrlog
git -C "$repo" worktree add --quiet --detach "$worktree" "$base"

rows=()
for plant in "${plants[@]}"; do
    patch=$plants_dir/$plant.patch
    # Back to the base: only the files the last plant touched change, so
    # the shared target dir rebuilds only what it must.
    git -C "$worktree" checkout --quiet --force --detach "$base"
    git -C "$worktree" clean --quiet --force -d
    if ! git -C "$worktree" apply --check "$patch" 2>"$logs/$plant.apply"; then
        cat "$logs/$plant.apply" >&2
        die "PATCH NO LONGER APPLIES: $patch on $base; update the plant"
    fi
    git -C "$worktree" apply "$patch"

    printf '%s: building\n' "$plant" >&2
    build_start=$EPOCHREALTIME
    if ! (cd "$worktree" &&
        CARGO_TARGET_DIR=$target_dir \
            CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS=true \
            CARGO_PROFILE_RELEASE_OVERFLOW_CHECKS=true \
            nice -n 19 cargo test --release --lib --no-run) >"$logs/$plant.build" 2>&1; then
        tail -n 40 "$logs/$plant.build" >&2
        die "BUILD FAILED with $patch applied (log: $logs/$plant.build)"
    fi
    build_seconds=$(seconds_since "$build_start")
    if grep -q '^warning' "$logs/$plant.build"; then
        printf '%s: the build warned (log: %s)\n' "$plant" "$logs/$plant.build" >&2
    fi
    binary=$(sed -n 's/^ *Executable unittests src\/lib\.rs (\(.*\))$/\1/p' "$logs/$plant.build" | tail -n 1)
    [[ -n $binary ]] || die "no test binary named in $logs/$plant.build"
    [[ $binary == /* ]] || binary=$worktree/$binary

    printf '%s: running up to %s seeds\n' "$plant" "$seeds" >&2
    run_start=$EPOCHREALTIME
    status=0
    (cd "$worktree" &&
        ISRLOG_SIM_FIRST_SEED=0 ISRLOG_SIM_SEEDS=$seeds ISRLOG_SIM_THREADS=1 \
            nice -n 19 "$binary" testing::sim::run::tests::simulated_runs --nocapture) \
        >"$logs/$plant.run" 2>&1 || status=$?
    run_seconds=$(seconds_since "$run_start")
    first=$(grep -m 1 -E '^simulation seed [0-9]+ (failed|panicked)' "$logs/$plant.run" || true)
    if [[ -n $first ]]; then
        seed=$(sed -E 's/^simulation seed ([0-9]+) .*/\1/' <<<"$first")
        needed=$((seed + 1))
    elif ((status == 0)); then
        needed="not found in $seeds"
        first="-"
    else
        tail -n 40 "$logs/$plant.run" >&2
        die "the run failed with no seed's report (status $status, log: $logs/$plant.run)"
    fi
    row="| $plant | $needed | ${build_seconds} s | ${run_seconds} s | $first |"
    printf '%s\n' "$row" >&2
    rows+=("$row")
done

printf '\n| plant | seeds needed | build | run | failure |\n|---|---|---|---|---|\n'
printf '%s\n' "${rows[@]}"
