#!/usr/bin/env bash
# The README's worked example of backfill, dead letters and replay, run for real on the dev
# cluster: backfill three past nights of a failing nightly close (each run retried, then kept as a
# dead letter), fix the template, replay the dead letters. Prints every command and its output.
set -euo pipefail
cd "$(dirname "$0")/.."
source hack/example-operator.sh
start_example_operator .cache/replay-example 9190 9191
trap 'kill $operator; kubectl delete namespace replay-demo --wait=false >/dev/null 2>&1 || true' EXIT

phase() { kubectl -n replay-demo get rr "$1" -o jsonpath='{.status.phase}'; }

kubectl create namespace replay-demo >/dev/null
kubectl config set-context --current --namespace=replay-demo >/dev/null
trap 'kill $operator; kubectl config set-context --current --namespace=default >/dev/null; kubectl delete namespace replay-demo --wait=false >/dev/null 2>&1 || true' EXIT
show kubectl apply -f examples/nightly-close.yaml
from=$(date -u -d '-3 days' +%Y-%m-%dT00:00:00Z) to=$(date -u +%Y-%m-%dT00:00:00Z)
printf '$ sed -e "s/\${FROM}/%s/" -e "s/\${TO}/%s/" examples/backfill.yaml.in | kubectl apply -f -\n' "$from" "$to"
sed -e "s/\${FROM}/$from/" -e "s/\${TO}/$to/" examples/backfill.yaml.in | kubectl apply -f -
echo
until_true '[[ $(phase backfill-close) == Complete ]]'
show kubectl get runrequests
show kubectl get jobs -L cronlease.io/trigger,cronlease.io/attempt,cronlease.io/dead-letter
show kubectl get sj nightly-close -o jsonpath='{range .status.deadLetters[*]}{.slot}  {.job}  {.attempts} attempts  {.reason}{"\n"}{end}'
echo "# the fix: the pods succeed from now on"
show kubectl patch sj nightly-close --type=json -p '[{"op":"remove","path":"/spec/jobTemplate/spec/template/metadata/annotations"}]'
show kubectl apply -f examples/replay-dead-letters.yaml
until_true '[[ $(phase replay-close) == Complete ]]'
show kubectl get runrequests
show kubectl get jobs -l cronlease.io/trigger=Replay -o custom-columns='JOB:.metadata.name,SLOT:.spec.template.metadata.annotations.cronlease\.io/scheduled-at,KEY:.spec.template.metadata.annotations.cronlease\.io/idempotency-key,DONE:.status.succeeded'
show kubectl get jobs -l cronlease.io/dead-letter -L cronlease.io/dead-letter
show kubectl get events --field-selector involvedObject.kind=RunRequest --sort-by=.lastTimestamp -o custom-columns='OBJECT:.involvedObject.name,TYPE:.type,REASON:.reason,MESSAGE:.message'
