#!/usr/bin/env bash
# make demo: from nothing to a running cronlease, then a minute of watching it work.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH" PYTHONPATH="$PWD/hack"
state=.cache/demo
mkdir -p "$state"
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "1. Control plane: etcd, kube-apiserver, controller-manager, scheduler, kwok (built from source on first run)"
python -m devcluster up
export KUBECONFIG="$PWD/.cache/cluster/kubeconfig"
kubectl get nodes

say "2. The Helm chart: the ScheduledJob CRD, least-privilege RBAC, the fencing policy"
python -m devcluster install
kubectl -n cronlease-system get serviceaccount,role,rolebinding
kubectl get clusterrole cronlease -o wide

say "3. The operator, as the chart's ServiceAccount (log: $state/operator.log)"
if [[ -f $state/operator.pid ]] && kill -0 "$(cat "$state/operator.pid")" 2>/dev/null; then
  echo "already running (pid $(cat "$state/operator.pid"))"
else
  # Outside the cluster (there is no image registry here), with a TokenRequest token of the
  # chart's ServiceAccount: exactly the permissions the Deployment would have.
  python -m devcluster sa-kubeconfig "$state/operator.kubeconfig" >/dev/null
  KUBECONFIG="$state/operator.kubeconfig" PYTHONPATH=operator POD_NAMESPACE=cronlease-system \
    nohup python -m cronlease --metrics-bind 127.0.0.1:9090 \
    --liveness-bind 127.0.0.1:9091 >"$state/operator.log" 2>&1 &
  echo $! >"$state/operator.pid"
  for _ in $(seq 100); do curl -sf http://127.0.0.1:9091/readyz >/dev/null && break; sleep 0.1; done
  echo "running (pid $(cat "$state/operator.pid")) as $(KUBECONFIG=$state/operator.kubeconfig \
    kubectl auth whoami -o jsonpath='{.status.userInfo.username}'), metrics on :9090"
fi

say "4. Examples"
kubectl create namespace demo --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl -n demo apply -f examples/every-10-seconds.yaml -f examples/forbid-long-running.yaml \
  -f examples/time-zone.yaml
run_at=$(date -u -d '+30 seconds' +%Y-%m-%dT%H:%M:%SZ)
sed "s/\${RUN_AT}/$run_at/" examples/one-off.yaml.in | kubectl -n demo apply -f -

cat <<'TEXT'

What you are about to see, refreshed every 5 seconds for a minute:
  - every-10-seconds creates a Job at :00, :10, :20 ... each one named after its slot, so a slot
    can never produce two Jobs; only the 3 newest finished Jobs are kept.
  - forbid-long-running fires every 5 s but its runs take 12 s: slots that come due during a run
    are skipped and counted (kubectl describe shows the SkippedConcurrencyForbid events).
  - one-off runs once, 30 s from now, then reports Completed and does nothing more.
  - berlin-morning-report waits for 09:30 Berlin time on a weekday (see NEXT).
  - The operator holds the Lease cronlease-system/cronlease-leader; every Job carries its identity
    and fencing token, and the API server refuses writes whose token is not the Lease's.
TEXT
for i in $(seq 12); do
  say "t+$((i * 5 - 5))s"
  kubectl -n demo get sj,jobs
  sleep 5
done

say "Skips and their reasons"
kubectl -n demo get sj forbid-long-running -o jsonpath='{.status.slotsSkipped}{"\n"}'
kubectl -n demo get events --field-selector involvedObject.kind=ScheduledJob \
  --sort-by=.lastTimestamp | tail -8

cat <<TEXT

The cluster and the operator keep running. Explore:
  export KUBECONFIG=$KUBECONFIG
  kubectl -n demo get sj -o wide
  kubectl -n demo describe sj forbid-long-running
  kubectl -n demo annotate sj every-10-seconds cronlease.io/run-now=\$(date +%s) --overwrite
  kubectl -n cronlease-system get lease cronlease-leader -o yaml
  curl -s http://127.0.0.1:9090/metrics | grep ^cronlease_
Stop everything with: make cluster-down (it also stops the demo operator)
TEXT
