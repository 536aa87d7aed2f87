"""The Helm chart: lint, golden renders, and the properties a reviewer would check by hand.

Golden files live in tests/unit/deploy/golden/; regenerate them with UPDATE_GOLDEN=1 after an
intended change and review the diff.

Most tests run the helm that `make controlplane` builds (or $HELM); without it they skip, so
`make unit` needs no Go build. `make test` builds it first, so there they run.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "manifests" / "helm" / "cronlease"
GOLDEN = Path(__file__).with_name("golden")
HELM = os.environ.get("HELM", str(REPO / ".cache" / "bin" / "helm"))

# Everything the Observability section of the README turns on.
OBSERVABILITY = [
    "--set", "prometheusRule.enabled=true", "--set", "prometheusRule.labels.release=prom",
    "--set", "dashboards.enabled=true", "--set", "dashboards.annotations.grafana_folder=jobs",
    "--set", "kubeStateMetrics.enabled=true", "--set", "kubeStateMetrics.namespace=monitoring",
    "--set", "kubeStateMetrics.serviceAccount=kube-state-metrics",
]  # fmt: skip
VALUE_SETS = {
    "default": [],
    "namespaced": ["--set", "watchNamespaces={team-a,team-b}", "--set", "replicaCount=3"],
    "unfenced-single": ["--set", "fencing.enabled=false", "--set", "replicaCount=1"],
    # Every parity value (pull secrets, overrides, scheduling, security contexts, ...) at once.
    "full": ["-f", str(Path(__file__).with_name("chart-values") / "full.yaml")],
    "observability": OBSERVABILITY,
}
# A second release beside "namespaced": its own name, namespace, Lease and namespaces; the CRD
# is the first release's.
SECOND_RELEASE = ("cronlease-b", "cronlease-b-system")
SECOND_VALUES = [
    "--set", "watchNamespaces={team-c}", "--set", "leaderElection.leaseName=b-leader",
    "--set", "crds.enabled=false",
]  # fmt: skip


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HELM, *args], capture_output=True, text=True, check=check)


def render(*values: str, release: tuple[str, str] = ("cronlease", "cronlease-system")) -> str:
    name, namespace = release
    return helm("template", name, str(CHART), "--namespace", namespace, *values).stdout


def documents(text: str) -> list[dict[str, Any]]:
    # libyaml's loader: the CRDs carry the whole JobSpec schema (over 1 MB of YAML each render).
    return [doc for doc in yaml.load_all(text, Loader=yaml.CSafeLoader) if doc]


def without_crd_bodies(rendered: str) -> str:
    """The render with each CRD reduced to its name and a digest. The CRDs are generated
    (hack/crdgen.py) and checked against crds/ by test_crd.py and test_chart_crd_is_identical_
    to_crds_dir; a golden copy of each would be 1 MB of YAML per value set to review."""
    kept = []
    for document in rendered.split("\n---\n"):
        if "\nkind: CustomResourceDefinition\n" in f"\n{document}\n":
            name = next(
                line.split(":", 1)[1].strip()
                for line in document.splitlines()
                if line.startswith("  name:")
            )
            digest = hashlib.sha256(document.encode()).hexdigest()
            document = f"# CustomResourceDefinition {name}: sha256 {digest}"
        kept.append(document)
    return "\n---\n".join(kept)


needs_helm = pytest.mark.skipif(
    not Path(HELM).exists(), reason=f"helm is not built at {HELM}: run `make controlplane`"
)


@needs_helm
@pytest.mark.parametrize(
    "values", [*VALUE_SETS.values(), SECOND_VALUES], ids=[*VALUE_SETS, "second-release"]
)
def test_helm_lint_is_clean(values: list[str]) -> None:
    result = helm("lint", "--strict", str(CHART), *values, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_helm
@pytest.mark.parametrize("name", [*sorted(VALUE_SETS), "second-release"])
def test_template_matches_golden(name: str) -> None:
    if name == "second-release":
        rendered = render(*SECOND_VALUES, release=SECOND_RELEASE)
    else:
        rendered = render(*VALUE_SETS[name])
    rendered = without_crd_bodies(rendered)
    golden = GOLDEN / f"{name}.yaml"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(rendered)
    assert rendered == golden.read_text(), (
        f"helm template drifted from {golden}; see the module doc"
    )


def test_chart_crd_is_identical_to_crds_dir() -> None:
    """crds/ is the CRD's one source; the chart carries a copy because Helm reads nothing outside
    the chart's directory."""
    crds = sorted((REPO / "crds").glob("*.yaml"))
    assert [crd.name for crd in crds] == [
        "cronlease.io_runrequests.yaml",
        "cronlease.io_runs.yaml",
        "cronlease.io_scheduledjobs.yaml",
    ]
    for crd in crds:
        assert (CHART / "files" / crd.name).read_text() == crd.read_text(), crd.name
    assert not (CHART / "crds").exists(), "Helm never upgrades crds/: the CRD is a template"


@needs_helm
def test_plain_manifests_are_rendered_from_the_chart(tmp_path: Path) -> None:
    rendered = tmp_path / "cronlease.yaml"
    subprocess.run(
        ["bash", str(REPO / "hack" / "render-manifests.sh"), str(rendered)],
        env={**os.environ, "HELM": str(Path(HELM).absolute())},
        check=True,
        capture_output=True,
    )
    assert rendered.read_text() == (REPO / "manifests" / "cronlease.yaml").read_text(), (
        "manifests/cronlease.yaml is stale: run hack/render-manifests.sh"
    )


@needs_helm
def test_pods_run_non_root_read_only_without_capabilities() -> None:
    deployment = next(d for d in documents(render()) if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in pod["containers"]:
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"]["drop"] == ["ALL"]
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert container["resources"]["limits"]["memory"]
    assert deployment["spec"]["replicas"] == 2
    assert pod["affinity"]["podAntiAffinity"]


def role(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(
        d for d in docs if d["kind"] in ("ClusterRole", "Role") and d["metadata"]["name"] == name
    )


@needs_helm
def test_rbac_is_least_privilege() -> None:
    docs = documents(render())
    rules = [
        (doc["kind"], rule)
        for doc in docs
        if doc["kind"] in ("ClusterRole", "Role")
        for rule in doc["rules"]
    ]
    for _, rule in rules:
        granted = set(rule["verbs"]) | set(rule["resources"])
        assert not granted & {"*", "secrets", "pods"}, rule
    lease_rules = [rule for kind, rule in rules if "leases" in rule["resources"]]
    # Only the election Role renews a Lease, by name; the operator's ClusterRole creates and
    # watches the heartbeat Leases of step attempts (and reads and deletes a Lease someone else
    # made under an attempt's name), never updates one.
    readers = [rule for rule in lease_rules if "update" in rule["verbs"]]
    assert readers
    heartbeat = role(docs, "cronlease-heartbeat")
    assert heartbeat["kind"] == "ClusterRole"
    # Granted by users to their step pods' ServiceAccount, never bound by the chart.
    assert not [d for d in docs if d.get("roleRef", {}).get("name") == "cronlease-heartbeat"]
    operator = [rule for rule in role(docs, "cronlease")["rules"] if "leases" in rule["resources"]]
    assert operator
    allowed = {"create", "get", "list", "watch", "delete"}
    assert all(set(rule["verbs"]) <= allowed for rule in operator)
    assert all(
        rule.get("resourceNames") == ["cronlease-leader"]
        for rule in readers
        if rule not in heartbeat["rules"]
    )


@needs_helm
def test_namespaced_install_binds_only_the_listed_namespaces() -> None:
    docs = documents(render(*VALUE_SETS["namespaced"]))
    assert not [d for d in docs if d["kind"] == "ClusterRoleBinding"]
    bound = sorted(d["metadata"]["namespace"] for d in docs if d["kind"] == "RoleBinding")
    assert bound == ["cronlease-system", "team-a", "team-b"]
    args = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"][
        "containers"
    ][0]["args"]
    assert "--namespace=team-a" in args
    assert "--namespace=team-b" in args


@needs_helm
def test_fencing_policy_points_at_the_release_lease() -> None:
    docs = documents(render())
    binding = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["paramRef"] == {
        "name": "cronlease-leader",
        "namespace": "cronlease-system",
        "parameterNotFoundAction": "Deny",
    }
    assert binding["spec"]["validationActions"] == ["Deny"]
    policy = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicy")
    assert policy["spec"]["paramKind"] == {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease"}
    unfenced = documents(render(*VALUE_SETS["unfenced-single"]))
    assert not [d for d in unfenced if "ValidatingAdmissionPolicy" in d["kind"]]


def fence(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The fencing policies and bindings, by kind and name."""
    return {
        f"{doc['kind']}/{doc['metadata']['name']}": doc
        for doc in docs
        if doc["kind"].startswith("ValidatingAdmissionPolicy")
    }


@needs_helm
def test_fence_is_bound_to_the_watched_namespaces_only() -> None:
    """Each release fences the namespaces it watches, or all of them when it watches all."""
    bindings = [
        doc
        for doc in fence(documents(render(*VALUE_SETS["namespaced"]))).values()
        if doc["kind"] == "ValidatingAdmissionPolicyBinding"
    ]
    assert sorted(doc["metadata"]["name"] for doc in bindings) == [
        "cronlease-fencing",
        "cronlease-fencing-writer",
        "cronlease-heartbeat",
        "cronlease-heartbeat-holder",
    ]
    for binding in bindings:
        assert binding["spec"]["matchResources"] == {
            "namespaceSelector": {
                "matchExpressions": [
                    {
                        "key": "kubernetes.io/metadata.name",
                        "operator": "In",
                        "values": ["team-a", "team-b"],
                    }
                ]
            }
        }
    clusterwide = fence(documents(render()))
    assert len(clusterwide) == 8
    assert all("matchResources" not in doc["spec"] for doc in clusterwide.values())


@needs_helm
@pytest.mark.parametrize(
    ("values", "user"),
    [
        ([], "system:serviceaccount:cronlease-system:cronlease"),
        (["--set", "serviceAccount.name=robot"], "system:serviceaccount:cronlease-system:robot"),
    ],
    ids=["default", "named"],
)
def test_fence_names_the_release_service_account(values: list[str], user: str) -> None:
    """The operator's writes are judged by their token; everyone else's by who they are."""
    policies = fence(documents(render(*values)))
    token = policies["ValidatingAdmissionPolicy/cronlease-fencing"]["spec"]
    writer = policies["ValidatingAdmissionPolicy/cronlease-fencing-writer"]["spec"]
    assert token["matchConditions"][0]["expression"] == f"request.userInfo.username == '{user}'"
    assert writer["matchConditions"][0]["expression"] == f"request.userInfo.username != '{user}'"
    assert "paramKind" not in writer, "a missing Lease must not refuse every Job update"
    operations = {
        resource: rule["operations"]
        for rule in writer["matchConstraints"]["resourceRules"]
        for resource in rule["resources"]
    }
    # Every route to what cronlease trusts: a Job's status keeps the metadata written with it.
    assert operations == {
        "jobs": ["CREATE", "UPDATE"],
        "jobs/status": ["UPDATE"],
        "scheduledjobs/status": ["UPDATE"],
        "runrequests/status": ["UPDATE"],
        "runs/status": ["UPDATE"],
        "runs": ["CREATE", "UPDATE"],
    }
    for validation in token["validations"] + writer["validations"]:
        assert "'cronlease fencing: " in validation["messageExpression"], validation
    for validation in writer["validations"]:
        assert validation["message"].startswith("cronlease fencing: "), validation


@needs_helm
def test_heartbeat_policy_judges_step_leases_only() -> None:
    """Every write that makes, labels or changes a step Lease, by anyone but the operator; never
    another Lease (a node's heartbeat, a leader election), nor a deletion."""
    spec = fence(documents(render()))["ValidatingAdmissionPolicy/cronlease-heartbeat"]["spec"]
    [rule] = spec["matchConstraints"]["resourceRules"]
    assert (rule["resources"], rule["operations"]) == (["leases"], ["CREATE", "UPDATE"])
    assert spec["matchConstraints"]["objectSelector"] == {
        "matchExpressions": [{"key": "cronlease.io/step", "operator": "Exists"}]
    }
    assert [c["expression"] for c in spec["matchConditions"]] == [
        "request.userInfo.username != 'system:serviceaccount:cronlease-system:cronlease'"
    ]
    expressions = " ".join(v["expression"] for v in spec["variables"])
    assert "startsWith" not in expressions, "a prefix lets another Job's pods renew the Lease"
    for validation in spec["validations"]:
        assert validation["message"].startswith("cronlease heartbeat: "), validation


@needs_helm
def test_two_releases_install_side_by_side() -> None:
    """No cluster-scoped name, nor a namespaced one in a shared namespace, is claimed by both
    releases; each one's fence names its own Lease and namespaces. (The CRD is the first
    release's: the second sets crds.enabled=false.)"""
    first = documents(render(*VALUE_SETS["namespaced"]))
    second = documents(render(*SECOND_VALUES, release=SECOND_RELEASE))

    def claimed(docs: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
        return {
            (doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"])
            for doc in docs
        }

    assert not claimed(first) & claimed(second)
    bindings = fence(second)
    assert bindings["ValidatingAdmissionPolicyBinding/cronlease-b-fencing"]["spec"]["paramRef"] == {
        "name": "b-leader",
        "namespace": "cronlease-b-system",
        "parameterNotFoundAction": "Deny",
    }
    for name in ("cronlease-b-fencing", "cronlease-b-fencing-writer"):
        binding = bindings[f"ValidatingAdmissionPolicyBinding/{name}"]
        [selector] = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
        assert selector["values"] == ["team-c"]
        assert binding["spec"]["policyName"] == name


# Each bad value, and what the error must name: its path in the values (or the unknown key).
BAD_VALUES = {
    "negative-replicas": (["--set", "replicaCount=-1"], "/replicaCount"),
    "string-replicas": (["--set-string", "replicaCount=two"], "/replicaCount"),
    "unknown-key": (["--set", "unknownKey=1"], "'unknownKey'"),
    "unknown-nested-key": (["--set", "image.registry=r.example"], "'registry'"),
    "bad-namespace": (["--set", "watchNamespaces={Bad_Name}"], "/watchNamespaces/0"),
    "negative-port": (["--set", "metrics.port=-1"], "/metrics/port"),
    "port-too-high": (["--set", "healthPort=70000"], "/healthPort"),
    "negative-memory": (["--set", "resources.limits.memory=-1Gi"], "/resources/limits/memory"),
    "negative-cpu": (["--set", "resources.requests.cpu=-1"], "/resources/requests/cpu"),
    "not-a-quantity": (["--set", "resources.requests.cpu=lots"], "/resources/requests/cpu"),
    "pull-secret-as-string": (["--set", "imagePullSecrets={regcred}"], "/imagePullSecrets/0"),
    "pull-secret-unknown-key": (["--set", "imagePullSecrets[0].nam=x"], "/imagePullSecrets/0"),
    "security-key-wrong-type": (
        ["--set-string", "securityContext.runAsNonRoot=yes"],
        "/securityContext/runAsNonRoot",
    ),
    "negative-run-as-user": (
        ["--set", "podSecurityContext.runAsUser=-1"],
        "/podSecurityContext/runAsUser",
    ),
    "pod-label-not-string": (["--set", "podLabels.tier=1"], "/podLabels/tier"),
    "toleration-operator": (["--set", "tolerations[0].operator=Maybe"], "/tolerations/0/operator"),
    "spread-without-skew": (
        ["--set", "topologySpreadConstraints[0].topologyKey=zone"],
        "/topologySpreadConstraints/0",
    ),
    "env-without-name": (["--set", "extraEnv[0].value=x"], "/extraEnv/0"),
    "no-account-no-name": (["--set", "serviceAccount.create=false"], "/serviceAccount/name"),
    "crds-enabled-string": (["--set-string", "crds.enabled=yes"], "/crds/enabled"),
    "unknown-rbac-key": (["--set", "rbac.create=true"], "'create'"),
    "zero-lease-duration": (
        ["--set", "leaderElection.leaseDurationSeconds=0"],
        "/leaderElection/leaseDurationSeconds",
    ),
    "negative-min-available": (
        ["--set", "podDisruptionBudget.minAvailable=-1"],
        "/podDisruptionBudget/minAvailable",
    ),
    "bad-fullname": (["--set", "fullnameOverride=Bad_Name"], "/fullnameOverride"),
    "bad-interval": (
        ["--set", "metrics.serviceMonitor.interval=soon"],
        "/metrics/serviceMonitor/interval",
    ),
    "bad-digest": (["--set", "image.digest=latest"], "/image/digest"),
    "volume-without-name": (["--set", "volumes[0].emptyDir.medium=Memory"], "/volumes/0"),
    "mount-without-path": (["--set", "volumeMounts[0].name=trust"], "/volumeMounts/0"),
    "bad-lease-name": (["--set", "leaderElection.leaseName=Leader"], "/leaderElection/leaseName"),
    "global-pull-secret-string": (
        ["--set", "global.imagePullSecrets={regcred}"],
        "/global/imagePullSecrets/0",
    ),
}


@needs_helm
@pytest.mark.parametrize(("bad", "named"), BAD_VALUES.values(), ids=BAD_VALUES)
def test_values_schema_rejects_bad_values(bad: list[str], named: str) -> None:
    result = helm("template", "cronlease", str(CHART), *bad, check=False)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr, result.stderr
    assert named in result.stderr, result.stderr


@needs_helm
def test_global_takes_any_key() -> None:
    """A parent chart's globals reach this chart too; they must not fail its schema."""
    values = ["--set", "global.storageClass=fast", "--set", "global.nested.deep=1"]
    assert documents(render(*values))


@needs_helm
def test_kubernetes_older_than_1_30_is_refused() -> None:
    """ValidatingAdmissionPolicy, the fence, is GA from 1.30."""
    old = helm("template", "cronlease", str(CHART), "--kube-version", "1.29.9", check=False)
    assert old.returncode != 0
    assert ">=1.30.0-0" in old.stderr, old.stderr
    assert render("--kube-version", "1.30.0")


def test_artifact_hub_annotations_parse() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    annotations = chart["annotations"]
    assert annotations["artifacthub.io/license"] == "Apache-2.0"
    crd = documents((REPO / "crds" / "cronlease.io_scheduledjobs.yaml").read_text())[0]
    [listed] = yaml.safe_load(annotations["artifacthub.io/crds"])
    assert (listed["kind"], listed["name"]) == (
        crd["spec"]["names"]["kind"],
        crd["metadata"]["name"],
    )
    assert listed["version"] in [v["name"] for v in crd["spec"]["versions"]]
    [example] = yaml.safe_load(annotations["artifacthub.io/crdsExamples"])
    assert example["apiVersion"] == f"{crd['spec']['group']}/{listed['version']}"
    assert all(
        link["url"].startswith("https://")
        for link in yaml.safe_load(annotations["artifacthub.io/links"])
    )
    assert chart["kubeVersion"] == ">=1.30.0-0"


def crd_of(
    docs: list[dict[str, Any]], name: str = "scheduledjobs.cronlease.io"
) -> dict[str, Any] | None:
    return next(
        (
            d
            for d in docs
            if d["kind"] == "CustomResourceDefinition" and d["metadata"]["name"] == name
        ),
        None,
    )


@needs_helm
def test_crd_is_a_template_kept_on_uninstall() -> None:
    """What `helm upgrade` applies is crds/'s CRD, with the release's labels and, by default, the
    annotation that keeps it (and every ScheduledJob) when the release goes."""
    source = documents((REPO / "crds" / "cronlease.io_scheduledjobs.yaml").read_text())[0]
    rendered = crd_of(documents(render()))
    assert rendered is not None
    metadata = rendered.pop("metadata")
    assert metadata["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert metadata["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    assert metadata["name"] == source.pop("metadata")["name"]
    assert rendered == source
    unkept = crd_of(documents(render("--set", "crds.keep=false")))
    assert unkept is not None
    assert "annotations" not in unkept["metadata"]
    assert crd_of(documents(render("--set", "crds.enabled=false"))) is None


def aggregated(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The ClusterRoles that join the built-in user roles, by the roles they join."""
    prefix = "rbac.authorization.k8s.io/aggregate-to-"
    return {
        doc["metadata"]["name"]: doc
        for doc in docs
        if doc["kind"] == "ClusterRole"
        and any(key.startswith(prefix) for key in doc["metadata"]["labels"])
    }


@needs_helm
def test_scheduledjobs_join_the_view_edit_and_admin_roles() -> None:
    roles = aggregated(documents(render()))
    assert sorted(roles) == ["cronlease-edit", "cronlease-view"]

    def joins(name: str) -> set[str]:
        labels = roles[name]["metadata"]["labels"]
        return {
            k.rsplit("-", 1)[1] for k, v in labels.items() if "aggregate-to-" in k and v == "true"
        }

    def grants(name: str) -> set[tuple[str, str]]:
        return {
            (resource, verb)
            for rule in roles[name]["rules"]
            for resource in rule["resources"]
            for verb in rule["verbs"]
            if rule["apiGroups"] == ["cronlease.io"]
        }

    assert joins("cronlease-view") == {"view", "edit", "admin"}
    assert joins("cronlease-edit") == {"edit", "admin"}
    resources = (
        "scheduledjobs",
        "scheduledjobs/status",
        "runrequests",
        "runrequests/status",
        "runs",
        "runs/status",
    )
    reads = {(r, v) for r in resources for v in ("get", "list", "watch")}
    assert grants("cronlease-view") == reads
    writes = {"create", "update", "patch", "delete", "deletecollection"}
    assert grants("cronlease-edit") == {("scheduledjobs", verb) for verb in writes} | {
        ("runrequests", verb) for verb in ("create", "delete", "deletecollection")
    } | {("runs", "delete")}
    # Status is the operator's (and its fence's): no user role writes it.
    assert not aggregated(documents(render("--set", "rbac.aggregate=false")))


def pod_of(docs: list[dict[str, Any]]) -> dict[str, Any]:
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    pod: dict[str, Any] = deployment["spec"]["template"]
    return pod


@needs_helm
def test_parity_values_reach_the_pod() -> None:
    docs = documents(render(*VALUE_SETS["full"]))
    template = pod_of(docs)
    pod = template["spec"]
    [container] = pod["containers"]
    assert template["metadata"]["labels"]["team"] == "platform"
    assert template["metadata"]["labels"]["app.kubernetes.io/name"] == "sched"
    assert template["metadata"]["annotations"] == {"example.com/scrape": "true"}
    # global's secrets first, then the chart's own.
    assert pod["imagePullSecrets"] == [{"name": "registry-global"}, {"name": "registry-a"}]
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["tolerations"][0]["key"] == "dedicated"
    # The user's affinity replaces the default preference for distinct nodes.
    assert list(pod["affinity"]) == ["nodeAffinity"]
    zone, host = pod["topologySpreadConstraints"]
    assert zone["labelSelector"] == {
        "matchLabels": {
            "app.kubernetes.io/name": "sched",
            "app.kubernetes.io/instance": "cronlease",
        }
    }
    assert host["labelSelector"] == {
        "matchLabels": {"app.kubernetes.io/instance": "chosen-by-the-user"}
    }
    assert [env["name"] for env in container["env"]] == [
        "POD_NAME",
        "POD_NAMESPACE",
        "TZ",
        "NODE_NAME",
    ]
    assert container["resources"]["requests"]["ephemeral-storage"] == "1Gi"
    assert container["image"] == f"registry.example/cronlease@{DIGEST}"
    # The user's volumes after the chart's own /tmp.
    assert [v["name"] for v in pod["volumes"]] == ["tmp", "trust"]
    assert [m["mountPath"] for m in container["volumeMounts"]] == ["/tmp", "/etc/ssl/certs/trust"]
    [service] = [d for d in docs if d["kind"] == "Service"]
    assert service["metadata"]["annotations"] == {"example.com/probe": "false"}
    assert service["metadata"]["labels"]["team"] == "platform"
    # Overrides are merged over the secure defaults, which stay unless nulled.
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {
        "drop": ["ALL"],
        "add": ["NET_BIND_SERVICE"],
    }
    # An existing ServiceAccount: none is created, and it is the one the pods and fence name.
    assert pod["serviceAccountName"] == "existing-robot"
    assert not [d for d in docs if d["kind"] == "ServiceAccount"]
    writer = fence(docs)["ValidatingAdmissionPolicy/ops-cronlease-fencing-writer"]
    user = "system:serviceaccount:cronlease-system:existing-robot"
    assert (
        writer["spec"]["matchConditions"][0]["expression"]
        == f"request.userInfo.username != '{user}'"
    )
    names = {doc["metadata"]["name"] for doc in docs if doc["kind"] != "CustomResourceDefinition"}
    assert all(name.startswith("ops-cronlease") for name in names), names


@needs_helm
def test_default_pod_keeps_its_scheduling() -> None:
    """Without the new values, the pod is what it was: no pull secrets, the anti-affinity."""
    pod = pod_of(documents(render()))["spec"]
    for key in ("imagePullSecrets", "priorityClassName", "topologySpreadConstraints"):
        assert key not in pod
    assert list(pod["affinity"]) == ["podAntiAffinity"]


CHART_VALUES = Path(__file__).with_name("chart-values")


@needs_helm
def test_kubernetes_typed_values_pass_fields_the_schema_does_not_name() -> None:
    """The schema types the fields it knows of a pod's settings and passes the rest on to
    Kubernetes, which validates them: a valid field the chart never heard of (or newer than it)
    installs."""
    pod = pod_of(documents(render("-f", str(CHART_VALUES / "kubernetes-fields.yaml"))))["spec"]
    [container] = pod["containers"]
    assert pod["securityContext"]["supplementalGroupsPolicy"] == "Strict"
    assert pod["securityContext"]["seLinuxChangePolicy"] == "MountOption"
    assert pod["securityContext"]["runAsNonRoot"] is True, "merged over the secure defaults"
    assert container["securityContext"]["procMount"] == "Default"
    assert container["resources"]["claims"] == [{"name": "gpu"}]
    assert pod["tolerations"][0]["tolerationSeconds"] == 60
    assert pod["topologySpreadConstraints"][0]["matchLabelKeys"] == ["pod-template-hash"]
    assert container["env"][-1]["valueFrom"]["configMapKeyRef"]["optional"] is True


DIGEST = "sha256:" + "0123456789abcdef" * 4


@needs_helm
def test_an_image_digest_pins_the_image_and_the_tag_is_ignored() -> None:
    def image(*values: str) -> str:
        [container] = pod_of(documents(render(*values)))["spec"]["containers"]
        return str(container["image"])

    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert image() == f"cronlease:{app_version}"
    assert image("--set", "image.tag=1.2.3") == "cronlease:1.2.3"
    pinned = image("--set", "image.tag=1.2.3", "--set", f"image.digest={DIGEST}")
    assert pinned == f"cronlease@{DIGEST}"


# Helm's longest release names (53 characters), alike but for their last character.
LONGEST = ("a" * 52 + "1", "a" * 52 + "2")


@needs_helm
def test_every_name_fits_63_characters_for_the_longest_release_names() -> None:
    """The full name of a 53-character release is 63 characters; a suffixed name (the metrics
    Service's, a DNS label) is cut with a hash of the full name, so two long names alike but for
    their end still name their cluster-wide objects apart."""
    everything = [*OBSERVABILITY, "--set", "metrics.serviceMonitor.enabled=true"]
    cluster_wide: list[set[tuple[str, str]]] = []
    for release in LONGEST:
        docs = documents(render(*everything, release=(release, "cronlease-system")))
        for doc in docs:
            name = doc["metadata"]["name"]
            assert len(name) <= 63, (doc["kind"], name)
            for value in doc["metadata"].get("labels", {}).values():
                assert len(value) <= 63, (doc["kind"], name, value)
        [service] = [d for d in docs if d["kind"] == "Service"]
        assert service["metadata"]["name"].endswith("-metrics")
        [arg] = [a for a in pod_of(docs)["spec"]["containers"][0]["args"] if "--lease-name=" in a]
        assert len(arg.removeprefix("--lease-name=")) <= 63
        cluster_wide.append(
            {
                (d["kind"], d["metadata"]["name"])
                for d in docs
                if "namespace" not in d["metadata"] and d["kind"] != "CustomResourceDefinition"
            }
        )
    first, second = cluster_wide
    assert len(first) == len(second) > 10
    assert not first & second


def lease_names(docs: list[dict[str, Any]]) -> set[str]:
    """The Lease the operator elects on, as its arguments, its Role and its fence name it."""
    [arg] = [a for a in pod_of(docs)["spec"]["containers"][0]["args"] if "--lease-name=" in a]
    [election] = [
        d for d in docs if d["kind"] == "Role" and d["metadata"]["name"].endswith("-election")
    ]
    named = {name for rule in election["rules"] for name in rule.get("resourceNames", [])}
    fences = [
        d["spec"]["paramRef"]["name"]
        for d in docs
        if d["kind"] == "ValidatingAdmissionPolicyBinding" and "paramRef" in d["spec"]
    ]
    return {arg.removeprefix("--lease-name="), *named, *fences}


@needs_helm
def test_the_default_lease_is_the_releases_own() -> None:
    """Two releases in one namespace never elect on one Lease; a release named cronlease keeps
    the name every release had before chart 0.3.0."""
    assert lease_names(documents(render())) == {"cronlease-leader"}
    other = documents(render(release=("team-b", "cronlease-system")))
    assert lease_names(other) == {"team-b-cronlease-leader"}
    chosen = documents(render("--set", "leaderElection.leaseName=mine"))
    assert lease_names(chosen) == {"mine"}


@needs_helm
def test_the_heartbeat_role_renews_only_and_its_holders_write_no_other_lease() -> None:
    docs = documents(render())
    grants = {
        (group, resource, verb)
        for rule in role(docs, "cronlease-heartbeat")["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    # patch: the sidecar's merge patch of renewTime (get: kubectl's, before it patches); the
    # marker the holder policy reads. Neither update nor create, delete or list.
    assert grants == {
        ("coordination.k8s.io", "leases", "get"),
        ("coordination.k8s.io", "leases", "patch"),
        ("cronlease.io", "heartbeats", "renew"),
    }
    policies = fence(docs)
    spec = policies["ValidatingAdmissionPolicy/cronlease-heartbeat-holder"]["spec"]
    [rule] = spec["matchConstraints"]["resourceRules"]
    assert (rule["resources"], rule["operations"]) == (["leases"], ["CREATE", "UPDATE", "DELETE"])
    assert "objectSelector" not in spec["matchConstraints"], "every Lease, not only step ones"
    conditions = {c["name"]: c["expression"] for c in spec["matchConditions"]}
    assert list(conditions) == ["a-service-account", "not-a-step-lease", "holds-the-heartbeat-role"]
    held = conditions["holds-the-heartbeat-role"].replace("\n", "").replace(" ", "")
    marker = "authorizer.group('cronlease.io').resource('heartbeats').namespace(request.namespace)"
    # Held through the role's own grant, not through a wildcard that grants every verb.
    assert held == f"{marker}.check('renew').allowed()&&!{marker}.check('any-verb').allowed()"
    assert [v["expression"] for v in spec["validations"]] == ["false"]
    binding = policies["ValidatingAdmissionPolicyBinding/cronlease-heartbeat-holder"]["spec"]
    assert binding["policyName"] == "cronlease-heartbeat-holder"
    assert binding["validationActions"] == ["Deny"]


@needs_helm
def test_values_reused_from_chart_0_1_0_are_refused_by_name(tmp_path: Path) -> None:
    """`helm upgrade --reuse-values` renders the chart with the old release's values in place of
    its values.yaml. From 0.1.0 they lack settings this chart reads: refused before anything is
    applied, naming each, not a nil pointer half-way, nor a ServiceAccount silently not made."""
    chart = tmp_path / "cronlease"
    shutil.copytree(CHART, chart)
    shutil.copy(CHART_VALUES / "chart-0.1.0-values.yaml", chart / "values.yaml")
    result = helm("template", "cronlease", str(chart), check=False)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr, result.stderr
    for key in ("'crds'", "'rbac'", "'dashboards'", "'kubeStateMetrics'", "'prometheusRule'"):
        assert key in result.stderr, result.stderr
    assert "at '/serviceAccount': missing property 'create'" in result.stderr, result.stderr


def test_every_setting_with_a_default_is_required() -> None:
    """What keeps --reuse-values from an older chart from reading a new setting as empty: any
    setting whose default is not empty or false is required (a Kubernetes-typed value may be
    nulled, to drop a default: it is not)."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    kubernetes_typed = {"resources", "podSecurityContext", "securityContext"}

    def unrequired(node: dict[str, Any], values: dict[str, Any], path: str) -> Iterator[str]:
        required = set(node.get("required", []))
        for key, default in values.items():
            if f"{path}{key}" in kubernetes_typed:
                continue
            if default not in (None, "", [], {}, False) and key not in required:
                yield f"{path}{key}"
            child = node["properties"][key]
            if isinstance(default, dict) and "properties" in child:
                yield from unrequired(child, default, f"{path}{key}.")

    assert list(unrequired(schema, defaults, "")) == []


def test_the_charts_app_version_is_the_operators() -> None:
    """The default image tag is the appVersion, and the image `make image` builds is tagged with
    the project's version."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    with (REPO / "pyproject.toml").open("rb") as file:
        assert chart["appVersion"] == tomllib.load(file)["project"]["version"]


HELM3 = Path(os.environ.get("HELM3", str(REPO / ".cache" / "bin" / "helm3")))


@pytest.mark.skipif(not HELM3.exists(), reason=f"helm3 is not built at {HELM3}: make helm3")
@needs_helm
def test_helm_3_lints_and_renders_the_chart_as_helm_4_does() -> None:
    """The support table's Helm 3 (hack/helm3): the same objects as Helm 4's."""
    lint = subprocess.run(
        [str(HELM3), "lint", "--strict", str(CHART)], capture_output=True, text=True
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    values = ["-f", str(CHART_VALUES / "full.yaml"), "--kube-version", "1.30.0"]
    command = [str(HELM3), "template", "cronlease", str(CHART), "-n", "cronlease-system", *values]
    rendered = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    assert documents(rendered) == documents(render(*values))
