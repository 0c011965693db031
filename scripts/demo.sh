#!/usr/bin/env bash
# The main job, end to end: install, build, generate the default model, start a
# disaggregated server (prefill + decode + router, sparse attention with a bf16
# index-K cache, a 1 GiB host cache tier on each engine), run the agentic
# `small` preset over a concurrency sweep up to 64 sessions, verify every
# answer bit for bit against the colocated reference engine, print the
# report, stop the servers.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# Only the command it runs: the tests are scripts/test.sh's.
TANDEM_TARGETS=tandem bash scripts/build.sh build

out=${TANDEM_DEMO_DIR:-demo-report}
mkdir -p "$out"
echo "== the embedded default model (generated on first use) =="
./build/tandem generate --prompt "Once upon a time" --max-tokens 24

echo "== tandem serve --disagg (sparse attention, bf16 index-K, top-k 64, 1 GiB host cache tier per engine) =="
log="$out/servers.log"
./build/tandem serve --disagg --port 0 --attention sparse --index-k-dtype bf16 --topk 64 --host-cache-size 1G \
  > "$log" 2>&1 &
server=$!
stop() {
  kill -TERM "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
}
trap stop EXIT
port=""
for _ in $(seq 1 600); do
  port=$(sed -n 's/.*router at http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log" | head -n1)
  [ -n "$port" ] && break
  kill -0 "$server" 2>/dev/null || { cat "$log"; echo "the servers did not start" >&2; exit 1; }
  sleep 0.2
done
[ -n "$port" ] || { cat "$log"; echo "the servers did not start in 120 s" >&2; exit 1; }
grep -E "^\[(prefill|decode|router)\] .* info  tandem (prefill|serve|router):" "$log" || true

echo "== tandem bench agentic --preset small (sweep ${TANDEM_DEMO_SWEEP:-8,16,32,64} sessions) =="
status=0
./build/tandem bench agentic --url "127.0.0.1:$port" --preset small --sweep "${TANDEM_DEMO_SWEEP:-8,16,32,64}" \
  --out-dir "$out" || status=$?

echo "(replay any transcript again with: ./build/tandem verify $out/transcript.jsonl)"
echo "report: $out/report.json, $out/report.svg, transcript: $out/transcript.jsonl, server logs: $log"
exit "$status"
