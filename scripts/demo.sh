#!/usr/bin/env bash
# The main job: install, build, and generate text with the embedded default model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh build
./build/tandem generate --prompt "Once upon a time" --max-tokens 64
