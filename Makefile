# cronlease: `make demo` runs the operator against a local control plane; `make test` checks it all.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The kubectl plugin's own environment: the official client must never be where the operator
# runs (kopf imports it whenever it is installed), so not in .venv, which e2e and benches use.
PLUGIN_VENV := .venv-plugin
export PATH := $(CURDIR)/$(BIN):$(PATH)
export PYTHONPATH := $(CURDIR)/hack
PYTEST := $(BIN)/python -m pytest -p no:cacheprovider
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE_ARCHIVE := .cache/image/cronlease-$(VERSION).oci.tar

.PHONY: help venv plugin plugin-dist krew controlplane helm3 promtool kstatus crds image image-docker-archive cluster-up cluster-down node-up node-down e2e-cluster lint typecheck unit e2e test demo bench failover chaos writes bench-shape bench-decide bench-shards bench-jobrecords soak clean

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

venv: $(VENV)/.installed ## Python environment with the operator, test tools and kubectl

$(PLUGIN_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(PLUGIN_VENV)
	$(PLUGIN_VENV)/bin/pip install --quiet --upgrade pip
	$(PLUGIN_VENV)/bin/pip install --quiet -e '.[plugin]'
	touch $@

plugin: $(PLUGIN_VENV)/.installed ## the kubectl plugin in its own venv: .venv-plugin/bin/kubectl-cronlease

# The plugin's own distribution (hack/plugin_dist.py): the modules it imports and its client, none
# of the operator's runtime; the wheels it needs are fetched beside it for offline installs.
PLUGIN_DIST := .cache/plugin-dist
PLUGIN_WHEEL := $(PLUGIN_DIST)/kubectl_cronlease-$(VERSION)-py3-none-any.whl

$(PLUGIN_WHEEL): $(VENV)/.installed pyproject.toml LICENSE hack/plugin_dist.py $(shell find operator/cronlease -name "*.py")
	$(BIN)/python hack/plugin_dist.py wheel --out $(PLUGIN_DIST)

plugin-dist: venv $(PLUGIN_WHEEL) ## the plugin's wheel, kubectl-cronlease (pipx install .cache/plugin-dist/kubectl_cronlease-<version>-py3-none-any.whl)

krew: plugin-dist ## krew's archive and manifest from that wheel (.cache/plugin-dist/cronlease.yaml; KREW_URL_BASE=where the archive is published)
	$(BIN)/python hack/plugin_dist.py krew --out $(PLUGIN_DIST) $(if $(KREW_URL_BASE),--url-base $(KREW_URL_BASE))

controlplane: ## build etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, helm (4), kube-state-metrics, a kubelet and pause (cached)
	bash hack/controlplane/build.sh
	bash hack/kube-state-metrics/build.sh

helm3: ## build Helm 3 as helm3 into .cache/bin (cached): the chart's tests and its upgrade e2e run both Helm majors
	bash hack/helm3/build.sh

promtool: ## build promtool from its Go module into .cache/bin (cached): the alert rules' tests run it
	bash hack/promtool/build.sh

kstatus: ## build the kstatus reader (sigs.k8s.io/cli-utils) into .cache/bin (cached): the unit and e2e tests read objects with it
	bash hack/kstatus/build.sh

# crdgen reads Kubernetes' OpenAPI from the Go module cache, at the k8s.io/kubernetes version that
# hack/controlplane/go.mod pins: downloaded first, so that a fresh clone needs no `make controlplane`.
crds: venv ## write the JobSpec schemas in crds/ (and the chart's copies) from the control plane's Kubernetes OpenAPI
	(cd hack/controlplane && go mod download k8s.io/kubernetes)
	$(BIN)/python hack/crdgen.py

# Rebuilt when an input of the Dockerfile or of the build scripts changed (bases: hack/image/bases.sh).
$(IMAGE_ARCHIVE): Dockerfile .dockerignore pyproject.toml README.md LICENSE $(shell find operator/cronlease -name "*.py") $(wildcard hack/image/*)
	bash hack/image/build.sh

image: $(IMAGE_ARCHIVE) ## the operator image from Dockerfile, by buildah, into .cache/image/cronlease-<version>.oci.tar

# For `kind load image-archive`: a Docker archive, whose name kind's containerd normalises as the
# kubelet asks for it (docker.io/library/cronlease:<version>).
image-docker-archive: image ## the operator image as a Docker archive: .cache/image/cronlease-<version>.docker.tar
	rm -f .cache/image/cronlease-$(VERSION).docker.tar
	bash hack/image/buildah push --quiet localhost/cronlease:$(VERSION) docker-archive:.cache/image/cronlease-$(VERSION).docker.tar:cronlease:$(VERSION)

cluster-up: venv controlplane ## start the local control plane (reuses a running one)
	$(BIN)/python -m devcluster up
	@echo "try: KUBECONFIG=.cache/cluster/kubeconfig kubectl get nodes"

cluster-down: venv ## stop the local control plane (and the demo's operator) and delete its data
	-[ -f .cache/demo/operator.pid ] && kill "$$(cat .cache/demo/operator.pid)" 2>/dev/null; rm -f .cache/demo/operator.pid
	$(BIN)/python -m devcluster down

node-up: venv controlplane image ## a real node beside kwok's (containerd, runc, a kubelet; root), the operator's image imported
	$(BIN)/python -m devcluster up
	$(BIN)/python -m devcluster node-up

node-down: venv ## stop the real node and take back what it changed on the host
	$(BIN)/python -m devcluster node-down

lint: venv ## ruff lint and format check, and the layers' import contracts (pyproject.toml)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache

typecheck: venv ## mypy --strict (the package, the tooling under hack/, and the benches)
	$(BIN)/mypy
	$(BIN)/mypy bench/*.py

unit: venv plugin kstatus ## unit tests (no cluster; the kstatus reader built first; the chart tests skip until `make controlplane` built helm)
	$(PYTEST) tests/unit

e2e: venv plugin controlplane helm3 kstatus image ## end-to-end tests against the real control plane (started if needed)
	$(PYTEST) tests/e2e

e2e-cluster: venv plugin ## the real-pod e2e tests against the cluster in $$KUBECONFIG (kind: load the image first, see README)
	$(PYTEST) tests/e2e/test_real_node.py --k8s-kubeconfig "$${KUBECONFIG:?set KUBECONFIG to the cluster}"

test: lint typecheck controlplane helm3 promtool kstatus image unit e2e ## everything CI runs (controlplane, helm3, promtool and kstatus first: the chart, alert and kstatus tests need them)

demo: venv controlplane ## start a cluster, run the operator, apply the examples and watch
	bash hack/demo.sh

bench: venv controlplane ## cronlease vs CronJob at N = 100, 1000, 5000 (bench/results/latest.md; BENCH_ARGS="--profile DIR" for both sides' CPU profiles)
	PYTHONPATH=$(CURDIR)/hack:$(CURDIR)/operator $(BIN)/python bench/bench.py $(BENCH_ARGS)

failover: venv controlplane ## 20 SIGKILLs and 20 SIGTERMs of the leader while ScheduledJobs fire every second: takeover times, slots late or lost (bench/results/failover.md; FAILOVER_ARGS="--rounds 5")
	PYTHONPATH=$(CURDIR)/hack:$(CURDIR)/operator $(BIN)/python bench/failover.py $(FAILOVER_ARGS)

chaos: venv controlplane ## faults against 3 replicas and 40 ScheduledJobs (TTL 0, no history, retries, backfills and replays, user deletions, Lease latency, meddling with step Jobs, lost deletes, quotas, restarts among them), then an audit of every slot, attempt, step pod and RunRequest target (bench/results/chaos-latest.md, .json; CHAOS_ARGS="--duration 1800")
	PYTHONPATH=$(CURDIR)/hack:$(CURDIR)/operator $(BIN)/python bench/chaos.py $(CHAOS_ARGS)

writes: venv controlplane ## API writes per slot, cronlease vs CronJob, counted by kube-apiserver (bench/results/writes.md)
	PYTHONPATH=$(CURDIR)/hack:$(CURDIR)/operator $(BIN)/python bench/writes.py $(WRITES_ARGS)

bench-shape: venv controlplane ## what the operator's Job shape costs the control plane against a bare Job (bench/results/jobshape.md)
	PYTHONPATH=$(CURDIR)/hack:$(CURDIR)/operator $(BIN)/python bench/jobshape.py $(SHAPE_ARGS)

bench-shards: venv ## a burst through S shard leaders, simulated from the measured costs: the largest N with p99 <= 1 s (bench/results/shards.md; no cluster)
	PYTHONPATH=$(CURDIR)/hack:$(CURDIR)/operator $(BIN)/python bench/shards.py $(SHARDS_ARGS)

bench-decide: venv ## the pure decision path on one core: slots per second, a day of per-second slots caught up (bench/results/decide.md; no cluster)
	PYTHONPATH=$(CURDIR)/hack:$(CURDIR)/operator $(BIN)/python bench/decide.py $(DECIDE_ARGS)

bench-jobrecords: venv ## what the live model keeps per Job, in-process: bytes per Job and where (bench/results/jobrecords.md; no cluster)
	PYTHONPATH=$(CURDIR)/hack:$(CURDIR)/operator $(BIN)/python bench/jobrecords.py $(JOBRECORDS_ARGS)

soak: venv ## a million Job deletions through the model in-process, RSS flat within 5% (bench/results/soak.md; no cluster)
	PYTHONPATH=$(CURDIR)/hack:$(CURDIR)/operator $(BIN)/python bench/soak.py $(SOAK_ARGS)

clean: cluster-down ## stop the cluster and remove build caches
	rm -rf .cache
