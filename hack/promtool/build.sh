#!/usr/bin/env bash
# Builds promtool, at the Prometheus version pinned in this module, for
# tests/unit/deploy/test_alerts.py (`promtool check rules`, `promtool test rules` on the chart's
# PrometheusRule). remove_all_sd leaves out every service discovery but file and http
# (promtool's rule commands need none), which keeps the build to a fraction.
set -euo pipefail
cd "$(dirname "$0")"
source ../gotool.sh
version=$(module_version github.com/prometheus/prometheus)
# Prometheus 3.x.y is tagged v0.3xx.y as a Go module: what `promtool --version` should say.
minor=${version#v0.}
minor=${minor%%.*}
release=${minor:0:1}.$((10#${minor:1})).${version##*.}
go_tool promtool github.com/prometheus/prometheus/cmd/promtool \
  "-X github.com/prometheus/common/version.Version=$release" remove_all_sd
