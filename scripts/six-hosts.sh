#!/usr/bin/env bash
# Six "hosts" on this machine (network namespaces joined by a bridge in a
# namespace of its own; nothing of the machine's own network changes): etcd,
# a router, two decode servers, two prefill engines, plus a client host and a
# spare. Every engine is given only etcd's address. The client runs the
# agentic workload (verified exact) as a soak while, on a schedule, a prefill
# host is cut off, a new prefill host starts, etcd stops for a while, and
# finally the router restarts. Prints what each step took and the report.
#
#   bash scripts/six-hosts.sh [--sessions 32] [--soak 150] [--etcd-outage 30] [--model FILE]
#
# Needs root (namespaces) and the build in build/ (scripts/build.sh build).
set -euo pipefail
cd "$(dirname "$0")/.."
sessions=32 soak=150 outage=30 model=""
while [ $# -gt 0 ]; do
  case "$1" in
    --sessions) sessions=$2; shift 2 ;;
    --soak) soak=$2; shift 2 ;;
    --etcd-outage) outage=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
tandem=$(pwd)/build/tandem
[ -x "$tandem" ] || { echo "build first: bash scripts/build.sh build" >&2; exit 1; }
if [ -z "$model" ]; then
  "$tandem" generate --prompt "x" --max-tokens 1 > /dev/null  # writes the default model on first use
  model=$(ls ~/.cache/tandem/models/default-small-f32-v*.gguf | tail -n1)
fi
out=${TANDEM_SIX_HOSTS_DIR:-six-hosts-report}
mkdir -p "$out"
out=$(cd "$out" && pwd)
tag="six$$"
names=(etcd router decode0 decode1 prefill0 prefill1 client spare)
addr() { echo "10.78.0.$(( $1 + 1 ))"; }
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  sleep 1
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  for i in "${!names[@]}"; do ip netns del "${tag}h$i" 2>/dev/null || true; done
  ip netns del "${tag}sw" 2>/dev/null || true
}
trap cleanup EXIT
ip netns add "${tag}sw"
ip -n "${tag}sw" link add br0 type bridge
ip -n "${tag}sw" link set br0 up
for i in "${!names[@]}"; do
  ip netns add "${tag}h$i"
  ip -n "${tag}h$i" link set lo up
  ip -n "${tag}sw" link add "v$i" type veth peer name eth0 netns "${tag}h$i"
  ip -n "${tag}sw" link set "v$i" master br0 up
  ip -n "${tag}h$i" addr add "$(addr "$i")/24" dev eth0
  ip -n "${tag}h$i" link set eth0 up
done
on() { local h=$1; shift; ip netns exec "${tag}h$h" "$@"; }
# In the background, with `spawn ... &`: the job's pid is the program's own
# (exec), so the signals below reach it, not a subshell.
spawn() { local h=$1; shift; exec ip netns exec "${tag}h$h" "$@"; }
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$out/cluster.key"
url="etcd://$(addr 0):2379/six"
now() { date +%s.%N; }
start=$(now)
at() { awk -v s="$start" -v n="$(now)" 'BEGIN { printf "%6.1f s", n - s }'; }

spawn 0 etcd --name six --data-dir "$out/etcd" --listen-client-urls "http://$(addr 0):2379" \
  --advertise-client-urls "http://$(addr 0):2379" --listen-peer-urls "http://$(addr 0):2380" \
  --initial-advertise-peer-urls "http://$(addr 0):2380" --initial-cluster "six=http://$(addr 0):2380" \
  --log-level warn > "$out/etcd.log" 2>&1 &
etcd_pid=$!
pids+=("$etcd_pid")
engine() {  # host role extra...
  local h=$1 role=$2; shift 2
  spawn "$h" "$tandem" "$role" -m "$model" --host "$(addr "$h")" --transport tcp --cluster-key-file "$out/cluster.key" \
    --discovery "$url" --discovery-ttl 5 --peer-timeout-ms 2000 "$@" > "$out/${names[$h]}.log" 2>&1 &
  pids+=("$!")
}
engine 4 prefill --port 7100
engine 5 prefill --port 7100
engine 2 serve --port 8081
engine 3 serve --port 8081
router() {
  spawn 1 "$tandem" router --host "$(addr 1)" --port 8080 --discovery "$url" -m "$model" \
    --cluster-key-file "$out/cluster.key" >> "$out/router.log" 2>&1 &
  router_pid=$!
  pids+=("$router_pid")
}
router
get() { on 6 curl -s --max-time 2 "$1" || true; }
peers() { get "$1/health" | python3 -c 'import json,sys
try: print(json.load(sys.stdin)["discovery"]["peers"].get(sys.argv[1], 0))
except Exception: print(-1)' "$2"; }
wait_for() {  # seconds what command...
  local limit=$1 what=$2; shift 2
  local until=$(( $(date +%s) + limit ))
  while ! "$@"; do
    [ "$(date +%s)" -lt "$until" ] || { echo "timed out after ${limit} s: $what" >&2; return 1; }
    sleep 0.2
  done
}
d0="http://$(addr 2):8081" d1="http://$(addr 3):8081" r="http://$(addr 1):8080"
both_prefill() { [ "$(peers "$d0" prefill)" = "$1" ] && [ "$(peers "$d1" prefill)" = "$1" ]; }
wait_for 120 "both decode servers see both prefill engines" both_prefill 2
router_ready() { [ "$(peers "$r" decode)" = 2 ] && get "$r/health" | grep -q '"status":"ok"'; }
wait_for 120 "the router sees both decode servers" router_ready
echo "$(at)  deployed from discovery alone: router sees 2 decode servers, each sees 2 prefill engines"

spawn 6 "$tandem" bench agentic --url "$(addr 1):8080" -m "$model" --preset small --sweep "$sessions" \
  --soak "$soak" --out-dir "$out" > "$out/bench.log" 2>&1 &
bench=$!
sleep 20
ip -n "${tag}sw" link set v4 down
cut=$(now)
echo "$(at)  prefill host ${names[4]} cut off (link down)"
wait_for 60 "the cut prefill engine leaves both lists" both_prefill 1
echo "$(at)  ... gone from both decode servers' lists $(awk -v a="$cut" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }') s after the cut (lease TTL 5 s)"
sleep 5
joined=$(now)
engine 7 prefill --port 7100
echo "$(at)  new prefill host ${names[7]} started"
links() { get "$1/metrics" | awk '$1 == "tandem_prefill_links_up" { print $2 }'; }
linked() { [ "$(links "$d0")" = 2 ] && [ "$(links "$d1")" = 2 ] && both_prefill 2; }
wait_for 60 "the new prefill engine is linked by both decode servers" linked
echo "$(at)  ... linked by both decode servers $(awk -v a="$joined" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }') s after its start (model load included)"
sleep 10
kill -STOP "$etcd_pid"
echo "$(at)  etcd stopped (SIGSTOP) for $outage s"
sleep "$outage"
echo "$(at)  router /health during the outage: $(get "$r/health")"
kill -CONT "$etcd_pid"
echo "$(at)  etcd continued"
wait "$bench" && status=0 || status=$?
echo "$(at)  bench agentic exited $status"
kill -TERM "$router_pid"; wait "$router_pid" 2>/dev/null || true
restarted=$(now)
router
wait_for 60 "the restarted router finds both decode servers" router_ready
echo "$(at)  router restarted: found both decode servers $(awk -v a="$restarted" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }') s after its start"
on 6 curl -s --max-time 30 "$r/v1/completions" -d '{"prompt":"across hosts","max_tokens":8,"temperature":0}'
echo
tail -n 40 "$out/bench.log"
for p in "${pids[@]}"; do [ "$p" = "$etcd_pid" ] || kill -TERM "$p" 2>/dev/null || true; done
for p in "${pids[@]}"; do [ "$p" = "$etcd_pid" ] || wait "$p" 2>/dev/null || true; done
for h in 4 5 7; do echo "${names[$h]}: $(grep -h "stopping (" "$out/${names[$h]}.log" | sed 's/.*stopping/stopping/')"; done
echo "report: $out/report.json; logs: $out/*.log"
exit "$status"
