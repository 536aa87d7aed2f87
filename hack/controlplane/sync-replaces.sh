#!/usr/bin/env bash
# Regenerates the replace block of go.mod from the pinned k8s.io/kubernetes version's own go.mod.
# Why: k8s.io/kubernetes points its staging modules at ./staging/..., which a consumer cannot
# resolve; each one must be replaced by the published module of the matching v0.X.Y tag.
set -euo pipefail
cd "$(dirname "$0")"
kube=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
staging="v0.${kube#v1.}"
upstream_mod=$(go mod download -json "k8s.io/kubernetes@${kube}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
modules=$(sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$upstream_mod")
args=()
for m in $modules; do args+=("-replace=${m}=${m}@${staging}"); done
go mod edit "${args[@]}"
echo "replaced $(wc -w <<<"$modules") staging modules with ${staging}"
