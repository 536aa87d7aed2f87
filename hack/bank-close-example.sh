#!/usr/bin/env bash
# The README's worked example of a multi-step run, for real on the dev cluster: the nightly bank
# close (examples/bank-close.yaml) run now; its interest step fails both attempts, the snapshot is
# compensated and the run escalated. Prints every command and its output.
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/example-operator.sh
start_example_operator .cache/bank-close-example 9192 9193
trap 'kill $operator; kubectl delete namespace bank --wait=false >/dev/null 2>&1 || true' EXIT

phase() { kubectl -n bank get runs -o jsonpath='{.items[0].status.phase}'; }

kubectl create namespace bank >/dev/null
show kubectl -n bank apply -f examples/bank-close.yaml
show kubectl -n bank annotate sj nightly-close cronlease.io/run-now="$(date +%s)"
until_true '[[ $(phase) == Compensated || $(phase) == CompensationFailed ]]'
show kubectl -n bank get runs
run=$(kubectl -n bank get runs -o jsonpath='{.items[0].metadata.name}')
show kubectl -n bank get jobs -l cronlease.io/run="$run" -L cronlease.io/step,cronlease.io/action,cronlease.io/attempt
show kubectl -n bank describe run "$run"
