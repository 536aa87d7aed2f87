"""The control plane is real: Jobs run to completion or failure, RBAC denies, admission policies
reject, and the built-in CronJob controller creates Jobs. Every other e2e test relies on these."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kube import Kube, condition, pod_template, wait_for


def job(
    name: str, namespace: str, duration: str = "0s", result: str = "Succeeded"
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"backoffLimit": 0, "template": pod_template(duration, result)},
    }


@pytest.fixture(scope="module")
def cronjob_namespace(kube: Kube) -> Iterator[str]:
    """Created first and checked last: the CronJob's first slot is up to a minute away."""
    name = f"e2e-cron-{uuid.uuid4().hex[:6]}"
    kube.run("create", "namespace", name)
    wait_for(lambda: kube.get("serviceaccount", "default", name), 30, "the default ServiceAccount")
    kube.apply(
        {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": {"name": "every-minute", "namespace": name},
            "spec": {
                "schedule": "* * * * *",
                "jobTemplate": {"spec": {"backoffLimit": 0, "template": pod_template()}},
            },
        }
    )
    yield name
    kube.run("delete", "namespace", name, "--wait=false")


def test_server_reports_its_real_version(kube: Kube, cronjob_namespace: str) -> None:
    version = kube.json("version")["serverVersion"]
    assert version["gitVersion"].startswith("v1."), version
    assert int(version["minor"]) >= 30


def test_job_whose_pod_succeeds_completes(kube: Kube, namespace: str) -> None:
    kube.create(job("ok", namespace, duration="1s"))
    done = wait_for(
        lambda: condition(kube.get("job", "ok", namespace), "Complete") == "True",
        60,
        "Job Complete",
    )
    assert done
    pods = kube.items("pods", namespace, "job-name=ok")
    assert [pod["status"]["phase"] for pod in pods] == ["Succeeded"]


def test_job_whose_pod_fails_fails(kube: Kube, namespace: str) -> None:
    kube.create(job("bad", namespace, result="Failed"))
    wait_for(
        lambda: condition(kube.get("job", "bad", namespace), "Failed") == "True", 60, "Job Failed"
    )
    assert condition(kube.get("job", "bad", namespace), "Complete") is None


def test_unprivileged_service_account_is_denied_by_rbac(kube: Kube, namespace: str) -> None:
    kube.run("create", "serviceaccount", "nobody", "-n", namespace)
    token = kube.run("create", "token", "nobody", "-n", namespace).stdout.strip()
    as_nobody = kube.as_token(token)
    # The token authenticates (so a denial below is RBAC's, not a failed login)...
    who = as_nobody.json("auth", "whoami")
    assert who["status"]["userInfo"]["username"] == f"system:serviceaccount:{namespace}:nobody"
    # ...and RBAC denies what no role grants.
    denied = as_nobody.run("get", "secrets", "-n", namespace, check=False)
    assert denied.returncode != 0
    assert "Forbidden" in denied.stderr or "forbidden" in denied.stderr
    # Granting the verb through a Role makes the same request pass: RBAC is what decided.
    kube.run("create", "role", "read-secrets", "--verb=list", "--resource=secrets", "-n", namespace)
    kube.run(
        "create",
        "rolebinding",
        "read-secrets",
        "--role=read-secrets",
        f"--serviceaccount={namespace}:nobody",
        "-n",
        namespace,
    )
    wait_for(
        lambda: as_nobody.run("get", "secrets", "-n", namespace, check=False).returncode == 0,
        30,
        "the RoleBinding to take effect",
    )


def test_validating_admission_policy_rejects_what_it_matches(kube: Kube, namespace: str) -> None:
    policy = f"smoke-{namespace}"
    kube.apply(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": policy},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": ["configmaps"],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": "!has(object.data) || !('forbidden' in object.data)",
                        "message": "the key 'forbidden' is not allowed",
                    }
                ],
            },
        }
    )
    kube.apply(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": policy},
            "spec": {
                "policyName": policy,
                "validationActions": ["Deny"],
                "matchResources": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
                },
            },
        }
    )
    try:

        def rejected() -> str | None:
            attempt = kube.run(
                "create",
                "configmap",
                f"bad-{uuid.uuid4().hex[:6]}",
                "-n",
                namespace,
                "--from-literal=forbidden=1",
                check=False,
            )
            return attempt.stderr if attempt.returncode != 0 else None

        # The policy takes effect once the API server's informer has it: poll, don't sleep.
        error = wait_for(rejected, 30, "the policy to reject a matching ConfigMap", interval=0.5)
        assert "the key 'forbidden' is not allowed" in error
        assert "ValidatingAdmissionPolicy" in error
        kube.run("create", "configmap", "fine", "-n", namespace, "--from-literal=allowed=1")
    finally:
        kube.run("delete", "validatingadmissionpolicybinding", policy, check=False)
        kube.run("delete", "validatingadmissionpolicy", policy, check=False)


def test_builtin_cronjob_controller_creates_a_job(kube: Kube, cronjob_namespace: str) -> None:
    jobs = wait_for(
        lambda: kube.items("jobs", cronjob_namespace), 75, "the CronJob controller to create a Job"
    )
    created = jobs[0]
    assert created["metadata"]["ownerReferences"][0]["kind"] == "CronJob"
    assert "batch.kubernetes.io/cronjob-scheduled-timestamp" in created["metadata"]["annotations"]
