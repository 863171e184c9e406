#!/usr/bin/env bash
# Runs the load bench (`benches/load.rs`) with two busy processes sharing the machine, in one of
# three arrangements, and prints its throughput lines.
#
#   runtime/benches/scripts/contended.sh MODE LOAD_BENCH_BINARY [WEBHOOK_BINARY]
#
# MODE:
#   quiet     nothing added;
#   beside    two busy loops started from this shell (same session and group as the bench);
#   session   the same two under `setsid` (an autogroup of their own);
#   cgroups   the bench's client, the server under test and the busy loops each in a cpu cgroup
#             of their own with equal shares, the way pods are (cgroup v1 `cpu` controller at
#             /sys/fs/cgroup/cpu, root only; the cgroups are removed afterwards).
# LOAD_BENCH_BINARY is target/release/deps/load-<hash> (built by `cargo bench -p gpufair-runtime
# --bench load --no-run`). WEBHOOK_BINARY defaults to the bench's own build; set
# GPUFAIR_WEBHOOK_WORKER_THREADS to choose the admission threads.
set -euo pipefail
mode=${1:?mode: quiet, beside, session or cgroups}
bench=${2:?path of the load bench binary}
webhook=${3:-}
busy=()
cg=/sys/fs/cgroup/cpu
cleanup() {
    for pid in "${busy[@]}"; do kill "$pid" 2>/dev/null || true; done
    if [[ $mode == cgroups ]]; then
        sleep 0.2
        for group in client server busy; do rmdir "$cg/gpufair-bench-$group" 2>/dev/null || true; done
    fi
}
trap cleanup EXIT
start_busy() {
    for _ in 1 2; do
        if [[ $mode == session ]]; then
            setsid sh -c 'while :; do :; done' &
        else
            sh -c 'while :; do :; done' &
        fi
        busy+=($!)
    done
}
run_bench() {
    if [[ -n $webhook ]]; then
        GPUFAIR_BENCH_WEBHOOK=$webhook exec "$bench" --bench
    else
        exec "$bench" --bench
    fi
}
case $mode in
quiet) run_bench 2>&1 | grep -E "server CPU|client CPU|context switches|max throughput|HTTP/2" ;;
beside | session)
    start_busy
    (run_bench) 2>&1 | grep -E "server CPU|client CPU|context switches|max throughput|HTTP/2"
    ;;
cgroups)
    for group in client server busy; do mkdir -p "$cg/gpufair-bench-$group"; done
    start_busy
    for pid in "${busy[@]}"; do echo "$pid" >"$cg/gpufair-bench-busy/cgroup.procs"; done
    out=$(mktemp)
    (
        echo "$BASHPID" >"$cg/gpufair-bench-client/cgroup.procs"
        run_bench
    ) >"$out" 2>&1 &
    client=$!
    # The bench starts each server as its child (so in the client's cgroup); move them.
    while kill -0 "$client" 2>/dev/null; do
        for pid in $(pgrep -P "$client" || true); do
            echo "$pid" >"$cg/gpufair-bench-server/cgroup.procs" 2>/dev/null || true
        done
        sleep 0.05
    done
    grep -E "server CPU|client CPU|context switches|max throughput|HTTP/2" "$out"
    rm -f "$out"
    ;;
*)
    echo "unknown mode $mode: expected quiet, beside, session or cgroups" >&2
    exit 2
    ;;
esac
