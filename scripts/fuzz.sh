#!/usr/bin/env bash
# Builds and runs the libFuzzer targets (clang, with AddressSanitizer and
# UndefinedBehaviorSanitizer). Not part of CI: run it by hand.
#   scripts/fuzz.sh messages [RUNS]   the handoff wire-message decoders (default 10,000,000 executions)
#   scripts/fuzz.sh peer [SECONDS]    a hostile peer against a live prefill engine over TCP (default 600 s)
#   scripts/fuzz.sh prefill [SECONDS] a hostile prefill engine against a live decode engine over TCP (default 600 s)
#   scripts/fuzz.sh http [SECONDS]    hostile HTTP requests (every API field, tandem_resume included) against a
#                                     live server, a bystander's latency measured beside them (default 600 s)
# The peer, prefill and http targets link the Release build's libraries (scripts/build.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:-messages}
command -v clang++ > /dev/null || { echo "clang++ is needed (apt-get install clang)"; exit 1; }
mkdir -p build-fuzz
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Isrc)
case "$target" in
  messages)
    runs=${2:-10000000}
    mkdir -p build-fuzz/corpus
    clang++ "${flags[@]}" fuzz/handoff_messages_fuzzer.cc src/transfer/messages.cc src/common/status.cc \
      src/common/sampling_params.cc -lxxhash -lpthread -o build-fuzz/handoff_messages_fuzzer
    ./build-fuzz/handoff_messages_fuzzer -runs="$runs" -rss_limit_mb=512 -max_len=4096 \
      -dict=fuzz/handoff_messages.dict -print_final_stats=1 build-fuzz/corpus
    ;;
  peer|prefill)
    seconds=${2:-600}
    [ -f build/libtandem_prefill.a ] || bash scripts/build.sh build
    name=$([ "$target" = peer ] && echo hostile_peer || echo hostile_prefill)
    mkdir -p "build-fuzz/$target-corpus"
    extra=()
    if [ "$target" = prefill ]; then
      # A few executions a second (each input is a connection the decode
      # engine dials): start from whole scripts, at full length at once.
      # Mode 0x0e: authenticated, sealed, a request open. Then a Commit with
      # the right pages digest, a put into the handoff's pages, an Abort, an
      # AbortAck, and an unsealed mode with a raw message.
      seeds=build-fuzz/prefill-seeds
      mkdir -p "$seeds"
      printf '\x0e\x0c\x10\x00AAAAAAAAAAAAAAAA' > "$seeds/commit"
      printf '\x0e\x09\x20\x00BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB\x0c\x10\x00AAAAAAAAAAAAAAAA' > "$seeds/put-then-commit"
      printf '\x0e\x06\x04\x00oops\x0e\x00\x00' > "$seeds/abort-then-ack"
      printf '\x0a\x02\x08\x00CCCCCCCC' > "$seeds/unsealed"
      printf '\x01\x00\x04\x00DDDD' > "$seeds/no-hello"
      # LeakSanitizer's check after an input reports the decode engine's
      # socket threads' stack buffers as leaked now and then (they run on
      # through the check; the input alone never reproduces it): off here,
      # and the RSS limit still stops a real leak.
      extra=(-len_control=0 -detect_leaks=0 "$seeds")
    fi
    # Only the target is instrumented; the engine is the Release build (its
    # allocations are still checked by ASan's allocator, its crashes caught).
    libs=(build/libtandem_prefill.a build/libtandem_decode.a build/libtandem_transfer.a build/libtandem_runtime.a
          build/libtandem_prefix.a build/libtandem_model.a build/libtandem_cache.a build/libtandem_kernels.a
          build/libtandem_common.a)
    clang++ "${flags[@]}" "fuzz/${name}_fuzzer.cc" -Wl,--start-group "${libs[@]}" -Wl,--end-group \
      $(pkg-config --libs ucx) -lprometheus-cpp-core -lssl -lcrypto -lspdlog -lfmt -lxxhash -lpthread \
      -o "build-fuzz/${name}_fuzzer"
    "./build-fuzz/${name}_fuzzer" -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=2048 -timeout=150 \
      -print_final_stats=1 "build-fuzz/$target-corpus" "${extra[@]}"
    ;;
  http)
    seconds=${2:-600}
    [ -f build/libtandem_server.a ] || bash scripts/build.sh build
    mkdir -p build-fuzz/http-corpus build-fuzz/http-objects
    # The server, the runtime and structured outputs (request parsing, templates, grammars, stop
    # strings, replay) are compiled here with coverage, so libFuzzer is guided
    # by what they do; the rest is the Release build.
    httplib_flags=$(pkg-config --cflags cpp-httplib)
    objects=()
    pids=()
    for src in src/server/*.cc src/runtime/*.cc src/structured/*.cc; do
      obj="build-fuzz/http-objects/$(basename "$(dirname "$src")")_$(basename "$src" .cc).o"
      # Again when the source or any header under src/ is newer than the object.
      if [ ! -f "$obj" ] || [ "$src" -nt "$obj" ] || [ -n "$(find src -name '*.h' -newer "$obj" -print -quit)" ]; then
        clang++ -std=c++20 -O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -Isrc \
          $httplib_flags -c "$src" -o "$obj.tmp" && mv "$obj.tmp" "$obj" &
        pids+=($!)
        if [ "${#pids[@]}" -ge "$(nproc)" ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
      fi
      objects+=("$obj")
    done
    for pid in "${pids[@]}"; do wait "$pid"; done
    for obj in "${objects[@]}"; do [ -f "$obj" ] || { echo "failed to compile $obj" >&2; exit 1; }; done
    libs=(build/libtandem_model.a build/libtandem_prefix.a build/libtandem_cache.a build/libtandem_kernels.a
          build/libtandem_common.a)
    clang++ "${flags[@]}" $httplib_flags fuzz/http_requests_fuzzer.cc -Wl,--start-group "${objects[@]}" "${libs[@]}" \
      -Wl,--end-group -lcpp-httplib -lprometheus-cpp-core -lssl -lcrypto -lspdlog -lfmt -lxxhash -lpthread \
      -o build-fuzz/http_requests_fuzzer
    # Each execution is a request over a socket (a few hundred a second):
    # -timeout covers the slowest legitimate answer, the RSS limit a leak.
    ./build-fuzz/http_requests_fuzzer -max_total_time="$seconds" -rss_limit_mb=4096 -max_len=4096 -len_control=0 -timeout=120 \
      -detect_leaks=0 -print_final_stats=1 build-fuzz/http-corpus
    ;;
  *) echo "usage: scripts/fuzz.sh messages [RUNS] | peer [SECONDS] | prefill [SECONDS] | http [SECONDS]"; exit 2 ;;
esac
