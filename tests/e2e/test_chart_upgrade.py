"""`helm upgrade` from the first published chart, 0.1.0 (issue 14, item 2; issue 35, item 2).

Chart 0.1.0 installed the CRD from crds/, which Helm never upgrades: a field added to the API was
pruned from every ScheduledJob after an upgrade. Here the release starts where a user of 0.1.0
stands (its chart, extracted from git, and the CRD as its crds/ installed it, unowned by Helm),
whose CRD lacks a field the working tree's has; the upgrade to the working tree's chart must take
the CRD over and serve the field. The chart README's own upgrade command is run as written: it
keeps the user's values, takes the new chart's defaults, and the operator then runs as the
upgraded chart's ServiceAccount and schedules what was made before the upgrade.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.cluster import bin_dir
from devcluster.install import CHART, install_chart
from devcluster.replica import OPERATOR_NAMESPACE, RELEASE, REPO, OperatorProcess
from kube import Kube, jobs_of, scheduled_at, scheduledjob, wait_for

# main just before the CRD became a template: chart 0.1.0, the CRD in its crds/.
PREVIOUS = "52329f4928512bb18e9cbfa3ba4f6ca0d5d2988e"
CRD_NAME = "scheduledjobs.cronlease.io"
# The CRD has gained no field since; the previous chart's copy is made to lack one, so that the
# upgrade has to add it.
FIELD = "startingDeadlineSeconds"


def previous_chart(into: Path) -> Path:
    """The chart as of PREVIOUS, its CRD without FIELD."""
    if subprocess.run(
        ["git", "-C", str(REPO), "cat-file", "-e", f"{PREVIOUS}^{{commit}}"]
    ).returncode:
        pytest.fail(f"commit {PREVIOUS} is not in this clone (a shallow clone?): fetch its history")
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", PREVIOUS, "manifests/helm/cronlease"],
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    chart = into / "manifests" / "helm" / "cronlease"
    [crd_file] = (chart / "crds").glob("*.yaml")
    crd = yaml.safe_load(crd_file.read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    del spec["properties"][FIELD]
    crd_file.write_text(yaml.safe_dump(crd))
    return chart


def served(kube: Kube, namespace: str) -> bool:
    """Whether the API server keeps FIELD in a ScheduledJob (a dry-run create) or prunes it."""
    probe = scheduledjob("probe", namespace, schedule="*/5 * * * *", **{FIELD: 300})
    result = kube.run(
        "create", "--dry-run=server", "--validate=false", "-o", "json", "-f", "-",
        stdin=json.dumps(probe),
    )  # fmt: skip
    return FIELD in json.loads(result.stdout)["spec"]


def apply_as_helm(kube: Kube, crd_file: Path) -> None:
    """Server-side apply as Helm's field manager: what Helm 4's install of a crds/ CRD leaves
    (and, applied over a CRD the chart's template made, the labels and annotations the template
    set go, since the same manager no longer sets them)."""
    crd = yaml.safe_load(crd_file.read_text())
    kube.run(
        "apply", "--server-side", "--field-manager=helm", "--force-conflicts", "-f", "-",
        stdin=json.dumps(crd),
    )  # fmt: skip


def test_upgrade_from_the_previous_chart_serves_the_new_field(
    crd: str, kube: Kube, namespace: str, k8s_cluster: Any, tmp_path: Path
) -> None:
    kubeconfig = Path(k8s_cluster.kubeconfig)
    old = previous_chart(tmp_path)
    try:
        install_chart(kubeconfig, chart=old, take_ownership=False)
        [old_crd] = (old / "crds").glob("*.yaml")
        apply_as_helm(kube, old_crd)
        metadata = kube.json("get", "crd", CRD_NAME)["metadata"]
        assert not metadata.get("annotations"), metadata
        assert not metadata.get("labels"), metadata
        wait_for(lambda: not served(kube, namespace), 30, f"{FIELD} pruned by the old CRD")

        # Helm will not adopt an object it did not create: the README's upgrade says so.
        with pytest.raises(RuntimeError, match="invalid ownership metadata") as refused:
            install_chart(kubeconfig, take_ownership=False)
        assert CRD_NAME in str(refused.value)
        assert not served(kube, namespace)

        install_chart(kubeconfig)  # with --take-ownership, as the README gives it
        wait_for(lambda: served(kube, namespace), 30, f"{FIELD} served after the upgrade")
        metadata = kube.json("get", "crd", CRD_NAME)["metadata"]
        assert metadata["annotations"]["helm.sh/resource-policy"] == "keep"
        assert metadata["annotations"]["meta.helm.sh/release-name"] == RELEASE
        assert metadata["annotations"]["meta.helm.sh/release-namespace"] == OPERATOR_NAMESPACE
        assert metadata["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        helm = [str(bin_dir() / "helm"), "--kubeconfig", str(kubeconfig)]
        listed = subprocess.run(
            [*helm, "list", "-n", OPERATOR_NAMESPACE, "-o", "json"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        [release] = [r for r in json.loads(listed) if r["name"] == RELEASE]
        version = yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]
        assert release["chart"] == f"cronlease-{version}"
    finally:
        # Whatever failed, the suite (and whoever shares the cluster) finds the whole CRD.
        apply_as_helm(kube, REPO / "crds" / "cronlease.io_scheduledjobs.yaml")
        install_chart(kubeconfig)


def documented_upgrade() -> list[str]:
    """The upgrade command of the chart's README, as a user would paste it (its first word,
    helm, is the one the tests run; the chart's path is relative to the repository)."""
    readme = (CHART / "README.md").read_text()
    found = re.search(r"<!-- upgrade-command .*?-->\n```bash\n(.*?)```", readme, re.DOTALL)
    assert found, "the chart README has no marked upgrade command"
    command = shlex.split(found.group(1).replace("\\\n", " "))
    assert command[:2] == ["helm", "upgrade"], command
    return command


def helm_json(helm: Path, kubeconfig: Path, *args: str) -> Any:
    command = [str(helm), "--kubeconfig", str(kubeconfig), "-n", OPERATOR_NAMESPACE, *args]
    result = subprocess.run([*command, "-o", "json"], capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


# The chart's support table names both: Helm 4 (the control plane's) and Helm 3 (hack/helm3).
@pytest.mark.parametrize("binary", ["helm", "helm3"])
def test_the_documented_upgrade_from_0_1_0_keeps_values_and_scheduling(
    binary: str,
    crd: str,
    kube: Kube,
    namespace: str,
    k8s_cluster: Any,
    tmp_path: Path,
    operator_kubeconfig: Path,
    started: list[OperatorProcess],
) -> None:
    kubeconfig = Path(k8s_cluster.kubeconfig)
    helm = bin_dir() / binary
    if not helm.exists():
        target = "controlplane" if binary == "helm" else binary
        pytest.fail(f"{helm} is not built: `make {target}` builds it")
    old = previous_chart(tmp_path)
    command = documented_upgrade()
    run = [str(helm), *command[1:], "--kubeconfig", str(kubeconfig)]
    try:
        # Where a user of 0.1.0 stands: its release (replicaCount is theirs: the operator runs
        # outside the cluster here), its CRD, and a ScheduledJob made under it.
        installed = subprocess.run(
            [str(helm), "upgrade", "--install", RELEASE, str(old), "--kubeconfig", str(kubeconfig),
             "--namespace", OPERATOR_NAMESPACE, "--set", "replicaCount=0"],
            capture_output=True, text=True,
        )  # fmt: skip
        assert installed.returncode == 0, installed.stderr
        [old_crd] = (old / "crds").glob("*.yaml")
        apply_as_helm(kube, old_crd)
        wait_for(lambda: not served(kube, namespace), 30, f"{FIELD} pruned by the old CRD")
        kube.apply(scheduledjob("before", namespace, schedule="*/2 * * * * *"))
        revisions = len(helm_json(helm, kubeconfig, "history", RELEASE))

        # --reuse-values would keep 0.1.0's defaults, which lack settings this chart reads: the
        # schema refuses it, naming them, before anything is applied.
        reused = [*run, "--reuse-values"]
        reused.remove("--reset-then-reuse-values")
        refused = subprocess.run(reused, capture_output=True, text=True, cwd=REPO)
        assert refused.returncode != 0
        assert "missing properties 'crds', 'rbac'" in refused.stderr, refused.stderr
        assert len(helm_json(helm, kubeconfig, "history", RELEASE)) == revisions

        upgraded = subprocess.run(run, capture_output=True, text=True, cwd=REPO)
        assert upgraded.returncode == 0, upgraded.stderr
        [release] = [r for r in helm_json(helm, kubeconfig, "list") if r["name"] == RELEASE]
        version = yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]
        assert (release["chart"], release["status"]) == (f"cronlease-{version}", "deployed")
        # The user's value kept, the new chart's defaults taken (0.1.0's lease was 15 s).
        assert helm_json(helm, kubeconfig, "get", "values", RELEASE) == {"replicaCount": 0}
        values = helm_json(helm, kubeconfig, "get", "values", RELEASE, "--all")
        assert values["leaderElection"]["leaseDurationSeconds"] == 4
        wait_for(lambda: served(kube, namespace), 30, f"{FIELD} served after the upgrade")

        # The operator, as the upgraded chart's ServiceAccount, leads and schedules the
        # ScheduledJob made before the upgrade.
        replica = OperatorProcess(operator_kubeconfig, tmp_path, name="upgraded")
        started.append(replica)
        replica.start()

        def two_jobs() -> list[dict[str, Any]] | None:
            jobs = jobs_of(kube, namespace, "before")
            return jobs if len(jobs) >= 2 else None

        jobs = wait_for(two_jobs, 30, "2 Jobs of the ScheduledJob made before the upgrade")
        assert len({scheduled_at(job) for job in jobs}) == len(jobs), "a slot ran twice"
        refusals = [
            float(line.rsplit(" ", 1)[1])
            for line in replica.metrics().splitlines()
            if line.startswith("cronlease_fenced_writes_rejected_total")
        ]
        assert refusals, "the operator exports cronlease_fenced_writes_rejected_total"
        assert sum(refusals) == 0, "the fence refused none of its writes"
    finally:
        apply_as_helm(kube, REPO / "crds" / "cronlease.io_scheduledjobs.yaml")
        install_chart(kubeconfig)
