# shellcheck shell=bash
# Shared by tools/envtest/build.sh and tools/cluster/build.sh (sourced, not run): the Go toolchain,
# the Kubernetes version stamp, and publishing a finished build into the cache.

# The go binary on stdout, or a message naming what to install and exit 1.
find_go() {
    local go_bin
    go_bin="$(command -v go || true)"
    if [[ -z "$go_bin" && -x /usr/local/go/bin/go ]]; then
        go_bin=/usr/local/go/bin/go
    fi
    if [[ -z "$go_bin" ]]; then
        log "the Go toolchain (>= 1.25) is needed to build $1."
        log "Install Go from https://go.dev/dl/ (or your distribution's Go >= 1.25 package)${2:+, or $2}."
        return 1
    fi
    echo "$go_bin"
}

# -ldflags for a Kubernetes program, so /version and `--version` report the real release.
k8s_ldflags() {
    local version="$1" minor pkg=k8s.io/component-base/version
    minor="${version#v1.}"
    minor="${minor%%.*}"
    echo "-s -w -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor" \
        "-X $pkg.gitTreeState=clean -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
}

# The version of module $1 required in go.mod file $2 (in a require block or a one-line require).
module_version() {
    awk -v module="$1" '$1 == "require" {$1 = ""; $0 = $0} $1 == module && $2 ~ /^v[0-9]/ {print $2; exit}' "$2"
}

# Move the finished build folder $1 to $2 atomically; if a concurrent build published first, ours
# is discarded (the caller's EXIT trap removes it).
publish() {
    if mv -T "$1" "$2" 2>/dev/null; then
        trap - EXIT
    else
        log "another build already published $2"
    fi
}
