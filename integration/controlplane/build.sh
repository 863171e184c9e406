#!/usr/bin/env bash
# Builds the Kubernetes control plane the end-to-end tests run against, from Go modules:
# kube-apiserver, kube-scheduler, kube-controller-manager and kubectl (k8s.io/kubernetes),
# etcd (go.etcd.io/etcd/server/v3) and kwok (sigs.k8s.io/kwok), each pinned by the go.mod and
# go.sum of its own module beside this script.
#
#   integration/controlplane/build.sh TARGET_DIR
#
# installs them under TARGET_DIR/controlplane/<versions>-<hash of the pins>/bin, with kwok's
# stage files in .../stages, and prints that directory (its parent of bin/) as its last line.
# A directory that is already complete is reused at once, so the build runs once per change of
# the pins; Go's build cache makes a rebuild after a small change cheap. Progress goes to
# stderr: a cold build on two cores takes about 15 minutes.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
target="${1:?usage: build.sh TARGET_DIR}"
mkdir -p "${target}"
target="$(cd "${target}" && pwd)"

say() { echo "gpufair control plane: $*" >&2; }

if ! command -v go >/dev/null 2>&1; then
    say "Go is not installed. Install Go 1.26 or newer (the 'golang' package or go.dev/dl),"
    say "or point KUBEBUILDER_ASSETS at a directory with etcd, kube-apiserver and kubectl and"
    say "GPUFAIR_CONTROLPLANE_BIN at one with kube-scheduler, kube-controller-manager and kwok."
    exit 3
fi
# Never download a toolchain: a module that needs a newer Go must fail here, loudly.
export GOTOOLCHAIN=local
export GOFLAGS="${GOFLAGS:-} -mod=readonly"

version_of() { (cd "${here}/$1" && go list -m -f '{{.Version}}' "$2"); }

pins="$(cat "${here}"/k8s/go.{mod,sum} "${here}"/etcd/go.{mod,sum} "${here}"/kwok/go.{mod,sum} "$0" \
    | sha256sum | cut -c1-12)"
k8s_version="$(version_of k8s k8s.io/kubernetes)"
etcd_version="$(version_of etcd go.etcd.io/etcd/server/v3)"
kwok_version="$(version_of kwok sigs.k8s.io/kwok)"
dir="${target}/controlplane/k8s-${k8s_version}-etcd-${etcd_version}-kwok-${kwok_version}-${pins}"

binaries=(kube-apiserver kube-scheduler kube-controller-manager kubectl etcd kwok)
complete() {
    [ -f "${dir}/complete" ] || return 1
}

if complete; then
    echo "${dir}"
    exit 0
fi

mkdir -p "${target}/controlplane"
exec 9>"${target}/controlplane/.lock"
if ! flock -n 9; then
    say "another build holds ${target}/controlplane/.lock; waiting for it"
    flock 9
fi
if complete; then
    echo "${dir}"
    exit 0
fi

staging="${dir}.partial"
rm -rf "${staging}"
mkdir -p "${staging}/bin" "${staging}/stages"
started=$(date +%s)
say "building Kubernetes ${k8s_version}, etcd ${etcd_version} and kwok ${kwok_version} from their Go modules"
say "into ${dir}"
say "a cold build downloads about 1.5 GB of modules and takes 10-20 minutes on two cores; later builds reuse Go's cache"

major="${k8s_version#v}"; major="${major%%.*}"
minor="${k8s_version#v*.}"; minor="${minor%%.*}"
k8s_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${k8s_version}"
k8s_ldflags+=" -X k8s.io/component-base/version.gitMajor=${major} -X k8s.io/component-base/version.gitMinor=${minor}"
k8s_ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
# client-go builds each component's User-Agent (as the audit log shows it) from its own copy.
k8s_ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=${k8s_version}"
k8s_ldflags+=" -X k8s.io/client-go/pkg/version.gitMajor=${major} -X k8s.io/client-go/pkg/version.gitMinor=${minor}"

step() {
    local module="$1" what="$2"; shift 2
    local t0; t0=$(date +%s)
    say "go build ${what} ..."
    (cd "${here}/${module}" && go build -trimpath "$@")
    say "  ${what} built in $(( $(date +%s) - t0 )) s"
}

step etcd "etcd" -ldflags "-s -w" -o "${staging}/bin/etcd" go.etcd.io/etcd/server/v3
step kwok "kwok" -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${kwok_version#v}" \
    -o "${staging}/bin/kwok" sigs.k8s.io/kwok/cmd/kwok
step k8s "kube-apiserver, kube-scheduler, kube-controller-manager and kubectl" \
    -ldflags "${k8s_ldflags}" -o "${staging}/bin/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl

# The stage files kwok's module ships (kwokctl injects them; the bare binary has none).
kwok_dir="$(cd "${here}/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
for stage in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
    pod/fast/pod-ready.yaml pod/fast/pod-delete.yaml; do
    install -m 0644 "${kwok_dir}/kustomize/stage/${stage}" "${staging}/stages/$(basename "${stage}")"
done

for binary in "${binaries[@]}"; do
    [ -x "${staging}/bin/${binary}" ] || { say "missing ${binary} after the build"; exit 1; }
done
{
    echo "kubernetes ${k8s_version}"
    echo "etcd ${etcd_version}"
    echo "kwok ${kwok_version}"
    echo "built in $(( $(date +%s) - started )) s"
} > "${staging}/complete"
rm -rf "${dir}"
mv "${staging}" "${dir}"
say "done in $(( $(date +%s) - started )) s: $(du -sh "${dir}" | cut -f1) in ${dir}"
echo "${dir}"
