"""The Helm chart: lint, golden renders, and the properties a reviewer would check by hand.

Golden files live in tests/unit/golden/; regenerate them with UPDATE_GOLDEN=1 after an
intended change and review the diff.

Most tests run the helm that `make controlplane` builds (or $HELM); without it they skip, so
`make unit` needs no Go build. `make test` builds it first, so there they run.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
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
    "observability": OBSERVABILITY,
}
# A second release beside "namespaced": its own name, namespace, Lease and namespaces.
SECOND_RELEASE = ("cronlease-b", "cronlease-b-system")
SECOND_VALUES = ["--set", "watchNamespaces={team-c}", "--set", "leaderElection.leaseName=b-leader"]


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HELM, *args], capture_output=True, text=True, check=check)


def render(*values: str, release: tuple[str, str] = ("cronlease", "cronlease-system")) -> str:
    name, namespace = release
    return helm("template", name, str(CHART), "--namespace", namespace, *values).stdout


def documents(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


needs_helm = pytest.mark.skipif(
    not Path(HELM).exists(), reason=f"helm is not built at {HELM}: run `make controlplane`"
)


@needs_helm
@pytest.mark.parametrize("name", ["default", "namespaced", "observability"])
def test_helm_lint_is_clean(name: str) -> None:
    result = helm("lint", "--strict", str(CHART), *VALUE_SETS[name], check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_helm
@pytest.mark.parametrize("name", [*sorted(VALUE_SETS), "second-release"])
def test_template_matches_golden(name: str) -> None:
    if name == "second-release":
        rendered = render(*SECOND_VALUES, release=SECOND_RELEASE)
    else:
        rendered = render(*VALUE_SETS[name])
    golden = GOLDEN / f"{name}.yaml"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(rendered)
    assert rendered == golden.read_text(), (
        f"helm template drifted from {golden}; see the module doc"
    )


def test_chart_crd_is_identical_to_crds_dir() -> None:
    for crd in (REPO / "crds").glob("*.yaml"):
        assert (CHART / "crds" / crd.name).read_text() == crd.read_text(), crd.name


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
        assert container["resources"]["limits"]["memory"]
    assert deployment["spec"]["replicas"] == 2
    assert pod["affinity"]["podAntiAffinity"]


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
    assert all(kind == "Role" for kind, rule in rules if "leases" in rule["resources"])
    readers = [rule for rule in lease_rules if {"get", "update"} & set(rule["verbs"])]
    assert readers
    assert all(rule.get("resourceNames") == ["cronlease-leader"] for rule in readers)


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
    assert len(clusterwide) == 4
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
        rule["resources"][0]: rule["operations"]
        for rule in writer["matchConstraints"]["resourceRules"]
    }
    assert operations == {"jobs": ["CREATE", "UPDATE"], "scheduledjobs/status": ["UPDATE"]}
    for validation in token["validations"] + writer["validations"]:
        assert "'cronlease fencing: " in validation["messageExpression"], validation
    for validation in writer["validations"]:
        assert validation["message"].startswith("cronlease fencing: "), validation


@needs_helm
def test_two_releases_install_side_by_side() -> None:
    """No cluster-scoped name, nor a namespaced one in a shared namespace, is claimed by both
    releases; each one's fence names its own Lease and namespaces. (The CRD, from crds/, is
    shared: Helm installs it once and never claims it for a release.)"""
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


@needs_helm
@pytest.mark.parametrize(
    "bad",
    [
        ["--set", "replicaCount=-1"],
        ["--set", "unknownKey=1"],
        ["--set", "watchNamespaces={Bad_Name}"],
    ],
    ids=["negative-replicas", "unknown-key", "bad-namespace"],
)
def test_values_schema_rejects_bad_values(bad: list[str]) -> None:
    result = helm("template", "cronlease", str(CHART), *bad, check=False)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr, result.stderr
