#!/usr/bin/env bash
# Sets up everything the test suite needs on a fresh machine, then runs it.
# Usage: bash scripts/test.sh [extra pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check -e ".[test]"
python3 -m tests.kube.assets ensure  # kube-apiserver + etcd for envtest (tools/envtest; cold Go build)
exec python3 -m pytest -n 2 --dist loadgroup "$@"
