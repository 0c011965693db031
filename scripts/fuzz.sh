#!/usr/bin/env bash
# Builds and runs the libFuzzer target for the handoff wire messages (clang,
# with AddressSanitizer and UndefinedBehaviorSanitizer). Not part of CI: run
# it by hand. Usage: scripts/fuzz.sh [RUNS] (default 10,000,000 executions).
# Needs the Release build (scripts/build.sh) for the rest of the library.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10000000}
command -v clang++ > /dev/null || { echo "clang++ is needed (apt-get install clang)"; exit 1; }
[ -f build/libtandem_core.a ] || bash scripts/build.sh build
mkdir -p build-fuzz/corpus
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Isrc)
clang++ "${flags[@]}" fuzz/handoff_messages_fuzzer.cc src/transfer/messages.cc src/common/status.cc \
  build/libtandem_core.a -lxxhash -lpthread -o build-fuzz/handoff_messages_fuzzer
./build-fuzz/handoff_messages_fuzzer -runs="$runs" -rss_limit_mb=512 -max_len=4096 \
  -dict=fuzz/handoff_messages.dict -print_final_stats=1 build-fuzz/corpus
