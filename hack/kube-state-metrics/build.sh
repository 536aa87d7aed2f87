#!/usr/bin/env bash
# Builds kube-state-metrics, at the version pinned in this module, for
# tests/e2e/test_observability.py. About 2 minutes cold on 2 cores (measured).
set -euo pipefail
cd "$(dirname "$0")"
source ../gotool.sh
version=$(module_version k8s.io/kube-state-metrics/v2)
go_tool kube-state-metrics k8s.io/kube-state-metrics/v2 \
  "-X github.com/prometheus/common/version.Version=${version#v}"
