#!/usr/bin/env bash
# The layers of server/ (cmake/layers.cmake, docs/architecture.md, issue #46): the tree
# as it is passes the check every build runs, and an include that points against the
# arrows (a lower layer including a higher one, or the process) fails it, naming the
# file and the include. No PostgreSQL needed.
set -euo pipefail
root=${SP_ROOT:?}
work=${TEST_WORKDIR:-$(mktemp -d)}
mkdir -p "$work"

cmake -DSP_ROOT="$root" -P "$root/cmake/layers.cmake"
echo "ok: the tree's includes follow the layers"

check_refused() {  # file to plant the include in, the include
  local file=$1 include=$2 copy="$work/tree"
  rm -rf "$copy" && mkdir -p "$copy"
  cp -r "$root/cmake" "$root/server" "$root/routing" "$root/config" "$root/protocol" "$copy/"
  printf '#include "%s"\n' "$include" >>"$copy/$file"
  if out=$(cmake -DSP_ROOT="$copy" -P "$copy/cmake/layers.cmake" 2>&1); then
    echo "FAIL: $file including $include passed the layer check" >&2
    exit 1
  fi
  grep -qF "$file: #include \"$include\"" <<<"$out" || { echo "FAIL: the error does not name it: $out" >&2; exit 1; }
  echo "ok: $file including $include is refused"
}
check_refused server/net/pool.cpp server/session/session.hpp      # net -> session: upwards
check_refused server/state/metrics.hpp server/net/stream.hpp      # state -> net
check_refused server/cluster/catalog.cpp server/server.hpp        # cluster -> the process
check_refused server/txn/two_phase.cpp server/session/pump.hpp    # txn -> session
check_refused routing/router.cpp server/state/hosts.hpp           # routing -> server/
echo "PASS test_layers"
