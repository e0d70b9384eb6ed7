#!/usr/bin/env bash
# The end-to-end test on kind, for machines with Docker and internet access. It runs the same test body
# as the suite's local one-node cluster (tests/cluster/e2e.py): create a kind cluster, build the image,
# `kind load docker-image`, then helm install, ORDERS, reset, broker restart, upgrades, uninstall, and
# the same against a nats-server on this machine (broker.enabled=false). The cluster is deleted at the end.
#   bash scripts/e2e-kind.sh [extra pytest args]
# Needs on PATH: docker, kind, helm, python3 >= 3.11. KEEP_CLUSTER=1 keeps the cluster;
# KIND_CLUSTER=NAME picks its name (default jetstream-kopf-e2e); KIND_NODE_IMAGE=IMAGE its node image.
set -euo pipefail
cd "$(dirname "$0")/.."
cluster="${KIND_CLUSTER:-jetstream-kopf-e2e}"
image="jetstream-kopf:e2e"

for tool in docker kind helm python3; do
    if ! command -v "$tool" >/dev/null; then
        echo "e2e-kind: $tool is needed on PATH" >&2
        exit 1
    fi
done
if kind get clusters 2>/dev/null | grep -qx "$cluster"; then
    echo "e2e-kind: a kind cluster named $cluster exists; delete it (kind delete cluster --name $cluster)" >&2
    echo "e2e-kind: or pick another name with KIND_CLUSTER=NAME" >&2
    exit 1
fi

# shellcheck source=venv.sh
source scripts/venv.sh
workdir="$(mktemp -d)"
cleanup() {
    if [[ "${KEEP_CLUSTER:-}" != 1 ]]; then
        kind delete cluster --name "$cluster"
    fi
    rm -rf "$workdir"
}
trap cleanup EXIT

kind create cluster --name "$cluster" --kubeconfig "$workdir/kubeconfig" --wait 180s \
    ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"}
docker build --tag "$image" .
# Pods reach this machine at the IPv4 gateway of kind's Docker network (a nats-server listens there).
host_address="$(docker network inspect kind --format '{{range .IPAM.Config}}{{.Gateway}} {{end}}' |
    tr ' ' '\n' | grep -m1 -E '^[0-9]+(\.[0-9]+){3}$')"

export JSOPERATOR_E2E_KUBECONFIG="$workdir/kubeconfig"
export JSOPERATOR_E2E_LOAD_IMAGE="kind load docker-image --name $cluster"
export JSOPERATOR_E2E_HOST_ADDRESS="$host_address"
export JSOPERATOR_E2E_IMAGE="$image"
JETSTREAM_KOPF_HELM="$(command -v helm)"
export JETSTREAM_KOPF_HELM
python -m pytest tests/cluster/test_e2e.py -p no:xdist "$@"
