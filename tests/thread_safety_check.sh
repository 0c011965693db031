#!/usr/bin/env bash
# Clang's thread-safety analysis over every source that declares what its
# mutexes guard (GUARDED_BY / REQUIRES, common/mutex.h): an access without
# the lock, or a call that needs it from a function that does not hold it,
# is a compile error here. Syntax-only: nothing is linked.
set -euo pipefail
root=$1
cxx=$(command -v clang++ || true)
if [ -z "$cxx" ]; then
  echo "clang++ is not installed (scripts/install-deps.sh installs it): cannot run the thread-safety analysis" >&2
  exit 1
fi
flags=(-std=c++20 -fsyntax-only -Wthread-safety -Werror=thread-safety -Wno-unknown-warning-option -I"$root/src")
flags+=($(pkg-config --cflags libxxhash cpp-httplib 2>/dev/null || true))
# Every source that annotates, or includes a header that does (its accesses are checked too).
mapfile -t headers < <(grep -rlE "GUARDED_BY|REQUIRES\(|EXCLUDES\(" "$root/src" --include=*.h | sed "s|^$root/src/||")
mapfile -t files < <({
  grep -rlE "GUARDED_BY|REQUIRES\(|EXCLUDES\(" "$root/src" --include=*.cc
  for h in "${headers[@]}"; do grep -rlF "#include \"$h\"" "$root/src" --include=*.cc || true; done
} | sort -u)
[ ${#files[@]} -gt 0 ] || { echo "no annotated sources found under $root/src" >&2; exit 1; }
status=0
for f in "${files[@]}"; do
  "$cxx" "${flags[@]}" "$f" || { echo "FAILED: $f" >&2; status=1; }
done
echo "thread-safety analysis: ${#files[@]} files (${files[*]##*/src/}), status $status"
exit $status
