# Sourced by the README's worked examples (hack/*-example.sh): the dev cluster, the chart, and the
# operator running as the chart's ServiceAccount in the background, ready; and two helpers.
#   start_example_operator STATE_DIR METRICS_PORT HEALTH_PORT
#   show COMMAND...          print the command, run it, print a blank line
#   until_true EXPRESSION    wait up to 90 s for a shell expression to hold
start_example_operator() {
  local state=$1 metrics=$2 health=$3
  export PATH="$PWD/.venv/bin:$PATH" PYTHONPATH="$PWD/hack"
  mkdir -p "$state"
  python -m devcluster up >/dev/null
  python -m devcluster install >/dev/null
  export KUBECONFIG="$PWD/.cache/cluster/kubeconfig"
  python -m devcluster sa-kubeconfig "$state/operator.kubeconfig" >/dev/null
  KUBECONFIG="$state/operator.kubeconfig" PYTHONPATH=operator POD_NAMESPACE=cronlease-system \
    python -m cronlease --metrics-bind "127.0.0.1:$metrics" --liveness-bind "127.0.0.1:$health" \
    >"$state/operator.log" 2>&1 &
  operator=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$health/readyz" >/dev/null && break; sleep 0.1; done
}

show() { printf '$ %s\n' "$*"; "$@"; echo; }
until_true() { for _ in $(seq 900); do eval "$1" && return; sleep 0.1; done; echo "timed out: $1"; exit 1; }
