#!/usr/bin/env bash
# Ensures the envtest binaries (kube-apiserver, etcd) exist; builds them once with the Go toolchain.
# Versions come from go.mod next to this script. Binaries are cached outside the repo, keyed by the
# Kubernetes version: ${JSOPERATOR_ENVTEST_CACHE:-~/.cache/jetstream-kopf/envtest}/<k8s-version>/.
# $KUBEBUILDER_ASSETS (a folder with kube-apiserver and etcd) wins when set: nothing is built.
# Prints the folder on stdout, progress on stderr. Idempotent: returns at once when already built.
#   build.sh          find or build
#   build.sh --find   find only; exit 3 (printing nothing) when the binaries are not there yet
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
mode="${1:-build}"

log() { echo "envtest: $*" >&2; }
# shellcheck source=lib.sh
source "$here/lib.sh"

if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
    for bin in kube-apiserver etcd; do
        if [[ ! -x "$KUBEBUILDER_ASSETS/$bin" ]]; then
            log "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS has no executable $bin; fix it or unset it to build one"
            exit 1
        fi
    done
    echo "$KUBEBUILDER_ASSETS"
    exit 0
fi

k8s_version="$(module_version k8s.io/kubernetes "$here/go.mod")"
etcd_version="$(module_version go.etcd.io/etcd/server/v3 "$here/go.mod")"
cache_root="${JSOPERATOR_ENVTEST_CACHE:-$HOME/.cache/jetstream-kopf/envtest}"
dest="$cache_root/$k8s_version"

if [[ -x "$dest/kube-apiserver" && -x "$dest/etcd" ]]; then
    echo "$dest"
    exit 0
fi
if [[ "$mode" == "--find" ]]; then
    exit 3
fi

go_bin="$(find_go "kube-apiserver $k8s_version and etcd $etcd_version" \
    "point KUBEBUILDER_ASSETS at a folder that already holds kube-apiserver and etcd")"

mkdir -p "$cache_root"
work="$(mktemp -d "$cache_root/.build-$k8s_version.XXXXXX")"
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"

ldflags="$(k8s_ldflags "$k8s_version")"

log "building kube-apiserver $k8s_version and etcd $etcd_version with $("$go_bin" version | cut -d' ' -f3)"
log "(cold: ~0.5 GB of modules, ~2 GB Go build cache, 8-25 min on 2 cores; then cached in $dest)"
start=$SECONDS
cd "$here"
# Static binaries (no C toolchain needed); 2 parallel jobs keep a shared machine usable.
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:--p=2}"
"$go_bin" build -trimpath -ldflags "$ldflags" -o "$work/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
log "kube-apiserver built ($((SECONDS - start)) s); building etcd"
"$go_bin" build -trimpath -ldflags "-s -w" -o "$work/etcd" go.etcd.io/etcd/server/v3

publish "$work" "$dest"
log "built in $((SECONDS - start)) s: $dest"
echo "$dest"
