#!/usr/bin/env bash
# Installs the Debian 12 packages tandem builds and tests with (as root).
# Skips apt entirely when everything is already there.
set -euo pipefail
packages=(cmake ninja-build g++ ccache pkg-config git ca-certificates
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev nlohmann-json3-dev
  libxxhash-dev libfmt-dev libspdlog-dev libcpp-httplib-dev libboost-dev libssl-dev prometheus-cpp-dev libucx-dev curl python3 python3-jsonschema python3-jinja2 spin clang
  etcd-server prometheus iproute2 systemd libzmq3-dev cppzmq-dev libmsgpack-cxx-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
fi
