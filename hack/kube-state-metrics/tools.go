//go:build tools

// Package tools pins the kube-state-metrics the e2e tests run against the chart's
// custom-resource-state config for ScheduledJob. Its own module: requiring it beside the control
// plane would let one's dependency versions move the other's.
package tools

import (
	_ "k8s.io/kube-state-metrics/v2"
)
