#!/usr/bin/env bash
# Builds the control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok,
# helm) and a real node's kubelet and pause program (hack/devcluster/node.py) from the versions
# pinned in this module, into $BIN_DIR (default: <repo>/.cache/bin).
# A cold build takes many minutes on 2 cores, so the result is cached and rebuilt only when
# go.mod, go.sum, this script or pause/main.go change.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
bin_dir=${BIN_DIR:-$repo/.cache/bin}
stamp_file=$bin_dir/.stamp
cd "$here"
source ../gotool.sh # module_version

stamp=$(cat go.mod go.sum build.sh pause/main.go | sha256sum | cut -d' ' -f1)
binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kwok helm pause)
if [[ -f $stamp_file && $(cat "$stamp_file") == "$stamp" ]]; then
  missing=0
  for b in "${binaries[@]}"; do [[ -x $bin_dir/$b ]] || missing=1; done
  if [[ $missing == 0 ]]; then echo "control plane binaries are up to date in $bin_dir"; exit 0; fi
fi

kube_version=$(module_version k8s.io/kubernetes)
kube_minor=$(cut -d. -f2 <<<"$kube_version")
etcd_version=$(module_version go.etcd.io/etcd/server/v3)
kwok_version=$(module_version sigs.k8s.io/kwok)
helm_version=$(module_version helm.sh/helm/v4)
build_date=$(date -u +%Y-%m-%dT%H:%M:%SZ)

ldflags="-s -w"
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
  ldflags+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$kube_minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
done
ldflags+=" -X sigs.k8s.io/kwok/pkg/consts.Version=${kwok_version#v}"
ldflags+=" -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=${kube_version#v}"
ldflags+=" -X helm.sh/helm/v4/internal/version.version=$helm_version"
ldflags+=" -X helm.sh/helm/v4/internal/version.gitTreeState=clean"

packages=(
  k8s.io/kubernetes/cmd/kube-apiserver
  k8s.io/kubernetes/cmd/kube-controller-manager
  k8s.io/kubernetes/cmd/kube-scheduler
  k8s.io/kubernetes/cmd/kubelet
  cronlease.dev/hack/controlplane/pause
  sigs.k8s.io/kwok/cmd/kwok
  helm.sh/helm/v4/cmd/helm
)
echo "building kubernetes $kube_version, etcd $etcd_version, kwok $kwok_version, helm $helm_version"
echo "into $bin_dir (a cold build takes 11-16 minutes on 2 cores; progress below)"
total=$(go list -deps "${packages[@]}" go.etcd.io/etcd/server/v3 | wc -l)
mkdir -p "$bin_dir"
start=$SECONDS
progress() {
  # go build -v names each package as it compiles it: count those, print anything else (errors).
  awk -v total="$total" '
    /^[^ #]+$/ { n++; if (n % 100 == 0) { printf "  compiled %d of at most %d packages\n", n, total; fflush() }; next }
    { print; fflush() }'
}
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false
go build -v -trimpath -ldflags "$ldflags" -o "$bin_dir/" "${packages[@]}" 2>&1 | progress
go build -v -trimpath -ldflags "$ldflags -X go.etcd.io/etcd/api/v3/version.GitSHA=release" \
  -o "$bin_dir/etcd" go.etcd.io/etcd/server/v3 2>&1 | progress
for b in "${binaries[@]}"; do [[ -x $bin_dir/$b ]] || { echo "build did not produce $b" >&2; exit 1; }; done
echo "$stamp" >"$stamp_file"
echo "built control plane in $((SECONDS - start)) s"
