#!/usr/bin/env bash
# Builds Helm 3, at the version pinned in this module, as helm3, for
# tests/e2e/test_chart_upgrade.py (the documented upgrade with both Helm majors).
set -euo pipefail
cd "$(dirname "$0")"
source ../gotool.sh
version=$(module_version helm.sh/helm/v3)
go_tool helm3 helm.sh/helm/v3/cmd/helm "-X helm.sh/helm/v3/internal/version.version=$version"
