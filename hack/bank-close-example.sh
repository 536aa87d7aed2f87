#!/usr/bin/env bash
# The README's worked example of a multi-step run, for real on the dev cluster: the nightly bank
# close (examples/bank-close.yaml) run now; its interest step fails both attempts, the snapshot is
# compensated and the run escalated. Prints every command and its output.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH" PYTHONPATH="$PWD/hack"
state=.cache/bank-close-example
mkdir -p "$state"
python -m devcluster up >/dev/null
python -m devcluster install >/dev/null
export KUBECONFIG="$PWD/.cache/cluster/kubeconfig"
python -m devcluster sa-kubeconfig "$state/operator.kubeconfig" >/dev/null
KUBECONFIG="$state/operator.kubeconfig" PYTHONPATH=operator POD_NAMESPACE=cronlease-system \
  python -m cronlease --metrics-bind 127.0.0.1:9192 --liveness-bind 127.0.0.1:9193 \
  >"$state/operator.log" 2>&1 &
operator=$!
trap 'kill $operator; kubectl delete namespace bank --wait=false >/dev/null 2>&1 || true' EXIT
for _ in $(seq 100); do curl -sf http://127.0.0.1:9193/readyz >/dev/null && break; sleep 0.1; done

show() { printf '$ %s\n' "$*"; "$@"; echo; }
until_true() { for _ in $(seq 900); do eval "$1" && return; sleep 0.1; done; echo "timed out: $1"; exit 1; }
phase() { kubectl -n bank get runs -o jsonpath='{.items[0].status.phase}'; }

kubectl create namespace bank >/dev/null
show kubectl -n bank apply -f examples/bank-close.yaml
show kubectl -n bank annotate sj nightly-close cronlease.io/run-now="$(date +%s)"
until_true '[[ $(phase) == Compensated || $(phase) == CompensationFailed ]]'
show kubectl -n bank get runs
run=$(kubectl -n bank get runs -o jsonpath='{.items[0].metadata.name}')
show kubectl -n bank get jobs -l cronlease.io/run="$run" -L cronlease.io/step,cronlease.io/action,cronlease.io/attempt
show kubectl -n bank describe run "$run"
