#!/usr/bin/env bash
# Builds a command-line tool the tests run, from its Go module, pinned by the go.mod and go.sum
# of its own module beside this script (one module per upstream project, so one project's
# dependencies never raise another's or the control plane's):
#
#   integration/tools/build.sh TARGET_DIR helm        # helm.sh/helm/v3's cmd/helm
#   integration/tools/build.sh TARGET_DIR promtool    # github.com/prometheus/prometheus's cmd/promtool
#   integration/tools/build.sh TARGET_DIR prometheus  # github.com/prometheus/prometheus's cmd/prometheus
#
# installs it as TARGET_DIR/tools/<tool>-<version>-<hash of the pins>/<tool> and prints that
# path as its last line. A finished build is reused at once, so a tool is built once per change
# of its pins; Go's build cache makes a rebuild after a small change cheap. The flags are the
# control plane's (integration/controlplane/build.sh): GOTOOLCHAIN=local, -mod=readonly,
# -trimpath, stripped, the version stamped with -ldflags.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
target="${1:?usage: build.sh TARGET_DIR helm|promtool|prometheus}"
tool="${2:?usage: build.sh TARGET_DIR helm|promtool|prometheus}"
mkdir -p "${target}"
target="$(cd "${target}" && pwd)"

say() { echo "gpufair tools: $*" >&2; }

# The module folder beside this script that pins the tool's project.
case "${tool}" in
    helm) pins_dir=helm; module=helm.sh/helm/v3; package=helm.sh/helm/v3/cmd/helm ;;
    promtool | prometheus)
        pins_dir=prometheus
        module=github.com/prometheus/prometheus
        package=github.com/prometheus/prometheus/cmd/${tool}
        ;;
    *) say "unknown tool ${tool}; accepted: helm, promtool, prometheus"; exit 2 ;;
esac

if ! command -v go >/dev/null 2>&1; then
    say "Go is not installed. Install Go 1.26 or newer (the 'golang' package or go.dev/dl),"
    say "or point GPUFAIR_$(echo "${tool}" | tr '[:lower:]' '[:upper:]') at a ${tool} binary."
    exit 3
fi
# Never download a toolchain: a module that needs a newer Go must fail here, loudly.
export GOTOOLCHAIN=local
export GOFLAGS="${GOFLAGS:-} -mod=readonly"

version="$(cd "${here}/${pins_dir}" && go list -m -f '{{.Version}}' "${module}")"
pins="$(cat "${here}/${pins_dir}/go.mod" "${here}/${pins_dir}/go.sum" "$0" | sha256sum | cut -c1-12)"
dir="${target}/tools/${tool}-${version}-${pins}"
binary="${dir}/${tool}"

if [ -x "${binary}" ]; then
    echo "${binary}"
    exit 0
fi

mkdir -p "${target}/tools"
exec 9>"${target}/tools/.${tool}.lock"
if ! flock -n 9; then
    say "another build holds ${target}/tools/.${tool}.lock; waiting for it"
    flock 9
fi
if [ -x "${binary}" ]; then
    echo "${binary}"
    exit 0
fi

tags=""
case "${tool}" in
    helm)
        ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=${version}"
        ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
        # The Kubernetes version `helm template` and `helm lint` assume without a cluster: as
        # helm's own Makefile sets it, from the client-go it is built with (v0.N is 1.N).
        client_go="$(cd "${here}/${pins_dir}" && go list -m -f '{{.Version}}' k8s.io/client-go)"
        k8s_minor="$(echo "${client_go}" | cut -d. -f2)"
        for versioned in pkg/lint/rules pkg/chartutil; do
            ldflags+=" -X helm.sh/helm/v3/${versioned}.k8sVersionMajor=1"
            ldflags+=" -X helm.sh/helm/v3/${versioned}.k8sVersionMinor=${k8s_minor}"
        done
        ;;
    promtool | prometheus)
        ldflags="-s -w -X github.com/prometheus/common/version.Version=${version#v}"
        ldflags+=" -X github.com/prometheus/common/version.Branch=release"
        # Prometheus's own build tag for leaving out every service-discovery plugin (cloud SDKs,
        # client-go): checking and unit-testing rules, parsing PromQL and scraping static
        # targets need none of them, and they are most of a cold build. Without the
        # `builtinassets` tag the server embeds no web UI; its HTTP API is all the tests use.
        tags="remove_all_sd"
        ;;
esac

staging="${dir}.partial"
rm -rf "${staging}"
mkdir -p "${staging}"
started=$(date +%s)
say "building ${tool} ${version} from its Go module into ${dir} (a few minutes cold on two cores)"
(cd "${here}/${pins_dir}" && go build -trimpath -tags "${tags}" -ldflags "${ldflags}" -o "${staging}/${tool}" "${package}")
"${staging}/${tool}" --help >/dev/null
rm -rf "${dir}"
mv "${staging}" "${dir}"
say "${tool} built in $(( $(date +%s) - started )) s"
echo "${binary}"
