#!/usr/bin/env bash
# Builds hack/kstatus (a reader of objects through sigs.k8s.io/cli-utils' kstatus, at the version
# pinned in this module), for the e2e tests that read cronlease's objects as Flux and other
# kstatus-based tools do.
set -euo pipefail
cd "$(dirname "$0")"
source ../gotool.sh
go_tool kstatus . "" "" -- main.go
