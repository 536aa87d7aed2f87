"""The heartbeat role renews step Leases and nothing else (issue 35, item 4), on the API server.

RBAC cannot name each attempt's Lease, so the chart's `<release>-heartbeat` ClusterRole grants
patch on every Lease of the namespace it is bound in; the `<release>-heartbeat-holder` policy
narrows it: whoever holds the role (told by the permission only the role grants) may write no
Lease that is not a step's heartbeat, such as another application's leader election. Whoever does
not hold it, and whoever holds every verb anyway, is not judged.
"""

from __future__ import annotations

import json
import subprocess

from kube import (
    HEARTBEAT_ROLE,
    OPERATOR,
    Kube,
    as_pod,
    can,
    lease_call,
    renewal,
    service_account,
    step_lease,
    verdicts,
)

STEP = "close-s0a1b2c3d4"


def test_a_holder_of_the_heartbeat_role_writes_no_lease_but_a_steps(
    kube: Kube, namespace: str, crd: str
) -> None:
    stepper = service_account(kube, namespace, "stepper", HEARTBEAT_ROLE)
    kube.run(
        "create", "role", "leases", "--verb=get,update,patch", "--resource=leases",
        "-n", namespace,
    )  # fmt: skip
    kube.run("create", "role", "everything", "--verb=*", "--resource=*.*", "-n", namespace)
    elector = service_account(kube, namespace, "elector", ("Role", "leases", "update leases"))
    almighty = service_account(
        kube, namespace, "almighty", HEARTBEAT_ROLE, ("Role", "everything", "delete pods")
    )
    kube.as_user(OPERATOR).create(step_lease(namespace, STEP))
    other = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "app-leader", "namespace": namespace},
        "spec": {"holderIdentity": "app-0", "leaseDurationSeconds": 15},
    }
    kube.create(other)
    pod = as_pod(kube, namespace, f"{STEP}-x7k2p")  # a pod of the step's Job, as stepper
    take = json.dumps({"spec": {"holderIdentity": "forged"}})

    def patch(who: Kube, lease: str, body: str) -> subprocess.CompletedProcess[str]:
        return lease_call(who, namespace, "patch", lease, "--type=merge", "-p", body)

    outcomes = {
        "its pod renews the step's Lease": patch(pod, STEP, renewal()),
        "its pod takes another Lease": patch(pod, "app-leader", take),
        "its pod renews another Lease": patch(pod, "app-leader", renewal()),
        "the account, no pod, takes another Lease": patch(stepper, "app-leader", take),
        "an elector without the role takes it": patch(elector, "app-leader", take),
        "a holder of every verb takes it": patch(almighty, "app-leader", take),
        "a holder of every verb deletes it": lease_call(
            almighty, namespace, "delete", "app-leader"
        ),
    }
    assert verdicts(outcomes) == {
        "its pod renews the step's Lease": "admitted",
        "its pod takes another Lease": "fenced",
        "its pod renews another Lease": "fenced",
        "the account, no pod, takes another Lease": "fenced",
        "an elector without the role takes it": "admitted",
        "a holder of every verb takes it": "admitted",
        "a holder of every verb deletes it": "admitted",
    }
    refused = outcomes["its pod takes another Lease"].stderr
    assert "holds the role cronlease-heartbeat" in refused, refused
    assert "may not UPDATE Lease app-leader" in refused, refused
    # RBAC: the role renews (and reads, as kubectl patch does first), and makes, replaces,
    # deletes or lists nothing.
    assert can(stepper, namespace, "patch", "leases")
    assert can(stepper, namespace, "get", "leases")
    for verb in ("update", "create", "delete", "list"):
        allowed = stepper.run("auth", "can-i", verb, "leases", "-n", namespace, check=False)
        assert allowed.stdout.strip() == "no", (verb, allowed.stdout, allowed.stderr)
