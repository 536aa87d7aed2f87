//go:build tools

// Package tools pins the Helm 3 that tests/e2e/test_chart_upgrade.py runs the chart README's
// upgrade with, beside the control plane's Helm 4: the chart's support table says which Helm
// versions are tested. Its own module: Helm 3 brings older k8s.io modules than the control
// plane's, and requiring both in one module would move one's versions under the other.
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
