#!/bin/sh
# The reliability suite: faults, churn, hostile brokers and long runs against rmqlua consumers,
# counting every message (nothing lost, duplicates within their bounds, nothing crashes).
# Not part of ctest: it takes minutes, and CI runs it after the tests (scripts/test).
#
#   scripts/reliability.sh [--long [--minutes M] [--rate R]] [--namesrv ADDR] [--only 1,4,..]
#   scripts/reliability.sh --soak [--minutes M] [--rate R]      (what scripts/soak runs)
#
#   (default)        short mode: the 21 scenarios in under 17 minutes on 2 cores
#   --long           scenarios 1-5 for M minutes each (default 12: an hour) with a steady
#                    producer of R msgs/s (default 5000) and their faults repeated; the table
#                    then also gives the consumers' RSS over time; and the network scenarios
#                    (14-20, 22) with their faults' full durations
#   --namesrv ADDR   run the consumer-side scenarios (1, 5, 7, 8, 9, 10, 12, 13) against an
#                    existing RocketMQ cluster instead of the development broker (the topics
#                    Rel<NN>_<id> are created on every master; the others are skipped)
#   --only LIST      only these scenarios
#   --soak           only the soak (scenario 21, never run otherwise): M minutes (default 30)
#                    at R msgs/s with members joining and leaving, reloads, broker restarts and
#                    blackholes (scripts/reliability/soak.lua)
#
# Environment: RMQLUA=path tests another build's rmqlua (default build/rmqlua, built if
# missing); RMQLUA_ASAN=path is the ASan+UBSan rmqlua the hostile-broker scenario runs (default
# build-asan/rmqlua when it exists, else RMQLUA); RMQ_RELIABILITY_LOGS=dir keeps a copy of the
# run's folder (logs, record files) there.
#
# Everything listens on 127.0.0.1 and is started by this run; every process it started is
# stopped by pid when it ends (also on Ctrl-C), and its temp folder is removed. The network
# scenarios (14-20, 22; root only: skipped otherwise) listen on the veth pairs they make
# (10.213.N.1) and break only those links; their namespaces and veth pairs are removed too.
# Prints the results table; exits 1 if a row has a missing message, a crash, a sanitizer report
# or a bound exceeded, 2 on a usage error.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
for a in "$@"; do
    case $a in
    -h | --help)
        sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'
        exit 0
        ;;
    esac
done

bin=${RMQLUA:-}
if [ -z "$bin" ]; then
    bin="$root/build/rmqlua"
    if [ ! -x "$bin" ] || [ ! -x "$root/build/reliability_startstop" ]; then
        "$root/scripts/build" "$root/build" >&2 || exit 1
    fi
fi
case $bin in /*) ;; *) bin="$(pwd)/$bin" ;; esac
[ -x "$bin" ] || { echo "reliability.sh: no rmqlua at $bin" >&2; exit 2; }
asan=${RMQLUA_ASAN:-}
if [ -z "$asan" ] && [ -x "$root/build-asan/rmqlua" ]; then asan="$root/build-asan/rmqlua"; fi
command -v luajit >/dev/null || { echo "reliability.sh: luajit is needed (scripts/deps)" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/rmqlua-reliability.XXXXXX") || exit 1
: > "$work/pids"

# Stop what the run started: each pid recorded with its start time, so that a pid the kernel
# gave to another process since is left alone.
cleanup() {
    trap - EXIT INT TERM
    while read -r pid st; do
        [ -r "/proc/$pid/stat" ] || continue
        now=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f20)
        [ "$st" = "?" ] || [ "$now" = "$st" ] || continue
        kill -CONT "$pid" 2>/dev/null
        kill -KILL "$pid" 2>/dev/null
    done < "$work/pids"
    # The network scenarios' namespaces and veth pairs (their nft tables and qdiscs go with them).
    if [ -s "$work/netns" ]; then
        while read -r kind name; do
            case $kind in
            ns) ip netns del "$name" 2>/dev/null ;;
            link) ip link del "$name" 2>/dev/null ;;
            esac
        done < "$work/netns"
    fi
    if [ -n "${RMQ_RELIABILITY_LOGS:-}" ]; then
        mkdir -p "$RMQ_RELIABILITY_LOGS" && cp -r "$work"/. "$RMQ_RELIABILITY_LOGS"/
    fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

export LUA_PATH="$root/scripts/reliability/?.lua;$root/spec/?.lua;$root/lua/?.lua;;"
luajit "$root/scripts/reliability/run.lua" --work "$work" --root "$root" --bin "$bin" \
    --asan-bin "$asan" "$@" &
driver=$!
echo "$driver $(sed 's/^.*) //' "/proc/$driver/stat" 2>/dev/null | cut -d' ' -f20)" >> "$work/pids"
wait "$driver"
exit $?
