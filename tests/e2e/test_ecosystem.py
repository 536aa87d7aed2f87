"""What tools other than cronlease's make of its objects, on the real control plane: kstatus
(the library Flux and kstatus-based waiters use, through hack/kstatus) reads a valid ScheduledJob
as Current and an invalid one as Failed; `kubectl explain` knows the pod template as it knows
CronJob's; a wrong field in it is refused at apply, named; `kubectl get` prints schedules and the
paused state, and the `cronlease` category lists the three kinds."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from devcluster.cluster import bin_dir
from devcluster.replica import OperatorProcess
from kube import Kube, condition, scheduledjob, wait_for

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def kstatus() -> Path:
    """hack/kstatus, built at the sigs.k8s.io/cli-utils version its go.mod pins (`make e2e`
    builds it first)."""
    binary = bin_dir() / "kstatus"
    if not binary.exists():
        pytest.fail(f"{binary} is not built: `make kstatus` builds it")
    return binary


def reader(kube: Kube, tool: Path, namespace: str) -> Callable[[str, str], dict[str, Any]]:
    """kstatus' reading of one object as `kubectl get -o json` returns it."""

    def read(kind: str, name: str) -> dict[str, Any]:
        obj = kube.run("get", kind, name, "-n", namespace, "-o", "json").stdout
        out = subprocess.run([str(tool)], input=obj, capture_output=True, text=True, check=True)
        reading: dict[str, Any] = json.loads(out.stdout)
        return reading

    return read


def test_kstatus_reads_a_valid_scheduledjob_current_and_an_invalid_one_failed(
    kube: Kube, namespace: str, operator: OperatorProcess, kstatus: Path
) -> None:
    read = reader(kube, kstatus, namespace)
    kube.apply(scheduledjob("valid", namespace, schedule="0 3 * * *"))
    # Accepted by the API server (its rules cannot order a range); refused by the operator.
    kube.apply(scheduledjob("invalid", namespace, schedule="30-10 * * * *"))
    current = wait_for(
        lambda: (r := read("scheduledjob", "valid"))["status"] == "Current" and r,
        20,
        "kstatus: valid is Current",
    )
    assert current["message"] == "Resource is Ready"
    failed = wait_for(
        lambda: (r := read("scheduledjob", "invalid"))["status"] == "Failed" and r,
        20,
        "kstatus: invalid is Failed",
    )
    assert "30-10" in failed["message"], failed
    assert failed["conditions"][0]["type"] == "Stalled"
    # An edit is InProgress until the operator has seen it, then Current again.
    kube.run(
        "patch", "scheduledjob", "invalid", "-n", namespace, "--type=merge",
        "-p", '{"spec": {"schedule": "10-30 * * * *"}}',
    )  # fmt: skip
    wait_for(
        lambda: read("scheduledjob", "invalid")["status"] == "Current",
        20,
        "kstatus: the fixed object is Current",
    )
    # A RunRequest the operator cannot carry out (a window in the future) is Failed too.
    kube.apply(
        {
            "apiVersion": "cronlease.io/v1alpha1",
            "kind": "RunRequest",
            "metadata": {"name": "later", "namespace": namespace},
            "spec": {
                "scheduledJobName": "valid",
                "backfill": {"from": "2200-01-01T00:00:00Z", "to": "2200-01-02T00:00:00Z"},
            },
        }
    )
    wait_for(
        lambda: read("runrequest", "later")["status"] == "Failed",
        20,
        "kstatus: the request is Failed",
    )


def test_a_new_scheduledjob_is_in_progress_until_the_operator_saw_it(
    kube: Kube, namespace: str, crd: str, started: list[OperatorProcess], kstatus: Path
) -> None:
    """With no operator running, nothing has looked at it: kstatus must not call it Current
    (the CRD defaults status.observedGeneration to 0, below metadata.generation)."""
    kube.apply(scheduledjob("unseen", namespace, schedule="0 3 * * *"))
    reading = reader(kube, kstatus, namespace)("scheduledjob", "unseen")
    assert reading["status"] == "InProgress", reading
    assert "observed generation is 0" in reading["message"]


def explain(kube: Kube, path: str) -> str:
    return kube.run("explain", path).stdout


def fields(text: str) -> list[str]:
    """The FIELDS names of `kubectl explain` output."""
    return re.findall(r"^  (\w+)\t<", text.split("FIELDS:", 1)[1], re.M)


def test_kubectl_explain_knows_the_pod_template_as_it_knows_cronjobs(kube: Kube, crd: str) -> None:
    ours = explain(kube, "scheduledjob.spec.jobTemplate.spec.template")
    theirs = explain(kube, "cronjob.spec.jobTemplate.spec.template")
    assert "Describes the pod that will be created when executing a job" in ours
    assert fields(ours) == fields(theirs) == ["metadata", "spec"]
    for path in ("template.spec", "template.spec.containers", "podFailurePolicy.rules"):
        ours = explain(kube, f"scheduledjob.spec.jobTemplate.spec.{path}")
        theirs = explain(kube, f"cronjob.spec.jobTemplate.spec.{path}")
        assert fields(ours) == fields(theirs), path
        assert len(fields(ours)) > 1, path
    image = explain(kube, "scheduledjob.spec.jobTemplate.spec.template.spec.containers.image")
    assert "Container image name" in image
    # A step's template has the same fields (described once, at spec.jobTemplate).
    step = explain(kube, "scheduledjob.spec.steps.jobTemplate.spec.template.spec.containers")
    assert fields(step) == fields(
        explain(kube, "cronjob.spec.jobTemplate.spec.template.spec.containers")
    )


def refused(kube: Kube, manifest: dict[str, Any]) -> str:
    result = kube.apply(manifest, check=False)
    assert result.returncode != 0, f"accepted: {result.stdout}"
    return result.stderr


def test_a_wrong_field_in_the_pod_template_is_refused_at_apply_naming_it(
    kube: Kube, namespace: str, crd: str
) -> None:
    typo = scheduledjob("typo", namespace, schedule="0 3 * * *")
    typo["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["imagee"] = "x"
    assert 'unknown field "spec.jobTemplate.spec.template.spec.containers[0].imagee"' in refused(
        kube, typo
    )
    wrong_type = scheduledjob("wrong-type", namespace, schedule="0 3 * * *")
    wrong_type["spec"]["jobTemplate"]["spec"]["backoffLimit"] = "six"
    assert "spec.jobTemplate.spec.backoffLimit: Invalid value" in refused(kube, wrong_type)
    quantity = scheduledjob("quantity", namespace, schedule="0 3 * * *")
    container = quantity["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    container["resources"] = {"limits": {"memory": "1 GB"}}
    assert "spec.jobTemplate.spec.template.spec.containers[0].resources.limits.memory" in (
        refused(kube, quantity)
    )
    step = scheduledjob("step-typo", namespace, schedule="0 3 * * *")
    step["spec"]["steps"] = [{"name": "a", "jobTemplate": step["spec"].pop("jobTemplate")}]
    step["spec"]["steps"][0]["jobTemplate"]["spec"]["template"]["spec"]["restartPolicyy"] = "x"
    assert 'unknown field "spec.steps[0].jobTemplate.spec.template.spec.restartPolicyy"' in (
        refused(kube, step)
    )
    assert kube.items("scheduledjobs", namespace) == []
    # What tools generate (creationTimestamp: null in the template's metadata) still applies.
    generated = scheduledjob("generated", namespace, schedule="0 3 * * *")
    generated["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["creationTimestamp"] = None
    kube.apply(generated)


def test_kubectl_get_prints_schedules_and_the_paused_state(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    kube.apply(scheduledjob("several", namespace, schedules=["0 3 * * *", "30 17 * * 1-5"]))
    kube.apply(
        scheduledjob(
            "failing",
            namespace,
            result="Failed",
            schedule="* * * * * *",
            pauseOnFailure={"consecutiveFailures": 1},
        )
    )
    wait_for(
        lambda: condition(kube.get("scheduledjob", "failing", namespace), "Paused") == "True",
        30,
        "failing to pause",
    )
    wait_for(
        lambda: condition(kube.get("scheduledjob", "several", namespace), "Ready") == "True",
        20,
        "several to be Ready",
    )
    table = kube.run("get", "scheduledjobs", "-n", namespace).stdout.splitlines()
    header, rows = table[0].split(), {line.split()[0]: line for line in table[1:]}
    assert header[:4] == ["NAME", "SCHEDULE", "TIMEZONE", "STATUS"], header
    assert '["0 3 * * *","30 17 * * 1-5"]' in rows["several"]
    assert "Scheduling" in rows["several"]
    assert "Paused" in rows["failing"]
    listed = kube.run("get", "cronlease", "-n", namespace, "-o", "name").stdout.split()
    assert "scheduledjob.cronlease.io/several" in listed
    everything = kube.run("get", "all", "-n", namespace, "-o", "name").stdout.split()
    assert "scheduledjob.cronlease.io/failing" in everything


@pytest.mark.parametrize(
    "example", sorted((REPO / "examples").glob("*.yaml")), ids=lambda p: p.name
)
def test_every_example_passes_the_schema(
    kube: Kube, namespace: str, crd: str, example: Path
) -> None:
    """The examples, as README tells users to apply them, against the generated JobSpec schema
    (a server-side dry run: nothing is stored)."""
    result = kube.run("apply", "--dry-run=server", "-n", namespace, "-f", str(example), check=False)
    assert result.returncode == 0, result.stderr


def test_the_crd_needs_server_side_apply(kube: Kube, crd: str) -> None:
    """Measured: the ScheduledJob CRD with Kubernetes' JobSpec schema is too large for
    client-side apply's last-applied annotation (262144 bytes); server-side apply (which README
    and manifests/cronlease.yaml use), `kubectl create` and Helm keep no such copy."""
    path = str(REPO / "crds" / "cronlease.io_scheduledjobs.yaml")
    client_side = kube.run("apply", "--dry-run=server", "-f", path, check=False)
    assert client_side.returncode != 0
    assert "metadata.annotations: Too long" in client_side.stderr, client_side.stderr
    server_side = kube.run(
        "apply", "--server-side", "--force-conflicts", "--dry-run=server", "-f", path, check=False
    )
    assert server_side.returncode == 0, server_side.stderr
