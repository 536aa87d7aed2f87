//go:build tools

// Package tools pins the promtool that tests/unit/deploy/test_alerts.py checks and unit-tests the
// chart's alerting rules with. Its own module: beside the control plane or kube-state-metrics,
// minimal version selection would move one's dependency versions with the other's.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
