#!/usr/bin/env bash
# Ensures the binaries of the one-node test cluster (tests/cluster) exist; builds them once with Go.
#   kubelet, kube-controller-manager, kube-scheduler, kube-proxy: the Kubernetes release pinned in
#     ../envtest/go.mod (the same module and version as envtest's kube-apiserver, which the cluster
#     also runs: build that with ../envtest/build.sh);
#   coredns (reduced plugin set) and pause (the pod sandbox): this folder's go.mod;
#   crictl and local-path-provisioner: `go install` at the versions below, each with its own go.mod
#     as released (checked against sum.golang.org like every module here).
# Cached outside the repo: ${JSOPERATOR_CLUSTER_CACHE:-~/.cache/jetstream-kopf/cluster}/<k8s-version>/,
# with a `versions` stamp; a changed version or source rebuilds. Prints the folder on stdout.
#   build.sh          find or build
#   build.sh --find   find only; exit 3 (printing nothing) when not built yet
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
envtest="$here/../envtest"
mode="${1:-build}"

log() { echo "cluster: $*" >&2; }
# shellcheck source=../envtest/lib.sh
source "$envtest/lib.sh"

crictl_version=v1.34.0              # cri-tools release matching Kubernetes 1.34
local_path_version=v0.0.30          # the newest local-path-provisioner on the Go module proxy
k8s_version="$(module_version k8s.io/kubernetes "$envtest/go.mod")"
coredns_version="$(module_version github.com/coredns/coredns "$here/go.mod")"
k8s_programs=(kubelet kube-controller-manager kube-scheduler kube-proxy)
cache_root="${JSOPERATOR_CLUSTER_CACHE:-$HOME/.cache/jetstream-kopf/cluster}"
dest="$cache_root/$k8s_version"

# What the cached binaries were built from: the versions and this folder's Go sources.
stamp="kubernetes $k8s_version
coredns $coredns_version
crictl $crictl_version
local-path-provisioner $local_path_version
sources $(cat "$here/go.sum" "$here"/*/main.go | sha256sum | cut -c1-16)"

if [[ -f "$dest/versions" && "$(cat "$dest/versions")" == "$stamp" ]]; then
    echo "$dest"
    exit 0
fi
if [[ "$mode" == "--find" ]]; then
    exit 3
fi

go_bin="$(find_go "the test cluster's kubelet, kube-proxy, CoreDNS ($k8s_version)")"
mkdir -p "$cache_root"
work="$(mktemp -d "$cache_root/.build-$k8s_version.XXXXXX")"
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"

log "building ${k8s_programs[*]} $k8s_version, coredns $coredns_version, crictl $crictl_version and"
log "local-path-provisioner $local_path_version with $("$go_bin" version | cut -d' ' -f3)"
log "(after envtest's build: ~0.4 GB more modules, ~5-10 min on 2 cores; then cached in $dest)"
start=$SECONDS
# Static binaries (no C toolchain needed); 2 parallel jobs keep a shared machine usable.
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:--p=2}"
ldflags="$(k8s_ldflags "$k8s_version")"
for program in "${k8s_programs[@]}"; do
    (cd "$envtest" && "$go_bin" build -trimpath -ldflags "$ldflags" -o "$work/$program" "k8s.io/kubernetes/cmd/$program")
    log "$program built ($((SECONDS - start)) s)"
done
for program in coredns pause; do
    (cd "$here" && "$go_bin" build -trimpath -ldflags "-s -w" -o "$work/$program" "./$program")
done
log "coredns and pause built ($((SECONDS - start)) s)"
GOBIN="$work" "$go_bin" install -trimpath -ldflags "-s -w" "sigs.k8s.io/cri-tools/cmd/crictl@$crictl_version"
GOBIN="$work" "$go_bin" install -trimpath -ldflags "-s -w" \
    "github.com/rancher/local-path-provisioner@$local_path_version"
echo "$stamp" > "$work/versions"

# A stale folder (other versions) is replaced: the old one is moved aside first.
if [[ -d "$dest" ]]; then
    mv -T "$dest" "$(mktemp -d -u "$cache_root/.stale-$k8s_version.XXXXXX")" && rm -rf "$cache_root"/.stale-*
fi
publish "$work" "$dest"
log "built in $((SECONDS - start)) s: $dest"
echo "$dest"
