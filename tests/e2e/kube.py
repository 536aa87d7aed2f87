"""The one support module of the e2e tests: kubectl with JSON, waiting on a condition with a
deadline, building and reading ScheduledJobs and their Jobs, accounts bound to roles and the
verdicts on what they write (the fence's and the heartbeat policies'), and replicas and their
Lease."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from devcluster.cluster import kwok_pod_template as pod_template
from devcluster.install import token_kubeconfig
from devcluster.replica import ELECTION, LEASE, OPERATOR_NAMESPACE, RELEASE, OperatorProcess

T = TypeVar("T")


class KubectlError(RuntimeError):
    pass


class Kube:
    """kubectl bound to one kubeconfig (and optionally a bearer token instead of its user)."""

    def __init__(self, kubeconfig: Path, impersonate: tuple[str, ...] = ()) -> None:
        self.kubeconfig = kubeconfig
        self.binary = shutil.which("kubectl") or "kubectl"
        self.impersonate = impersonate

    def as_user(self, user: str, *groups: str) -> Kube:
        """kubectl for the same cluster, as admin impersonating `user` (and `groups`): what the
        API server's authorization and admission see is that user."""
        flags = (f"--as={user}", *(f"--as-group={group}" for group in groups))
        return Kube(self.kubeconfig, flags)

    def as_token(self, token: str) -> Kube:
        """kubectl for the same cluster, authenticated by a bearer token instead of admin."""
        fd, path = tempfile.mkstemp(prefix="kubeconfig-token-")
        os.close(fd)
        return Kube(token_kubeconfig(self.kubeconfig, token, Path(path)))

    def run(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        command = [self.binary, "--kubeconfig", str(self.kubeconfig), *self.impersonate]
        result = subprocess.run(
            [*command, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "KUBECTL_KUBERC": "false"},
        )
        if check and result.returncode != 0:
            raise KubectlError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "-o", "json").stdout)

    def apply(
        self, manifest: dict[str, Any], *extra: str, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return self.run("apply", "-f", "-", *extra, stdin=json.dumps(manifest), check=check)

    def create(
        self, manifest: dict[str, Any], check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return self.run("create", "-f", "-", stdin=json.dumps(manifest), check=check)

    def get(self, kind: str, name: str, namespace: str | None = None) -> Any | None:
        args = ["get", kind, name, *(["-n", namespace] if namespace else [])]
        result = self.run(*args, "-o", "json", check=False)
        if result.returncode != 0:
            if "NotFound" in result.stderr or "not found" in result.stderr:
                return None
            raise KubectlError(result.stderr.strip())
        return json.loads(result.stdout)

    def items(self, kind: str, namespace: str, *selector: str) -> list[Any]:
        args = ["get", kind, "-n", namespace, *(["-l", ",".join(selector)] if selector else [])]
        items: list[Any] = self.json(*args)["items"]
        return items


def wait_for(
    predicate: Callable[[], T | None], timeout: float, what: str, interval: float = 0.25
) -> T:
    """Poll until `predicate` returns something truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last value: {last!r})")


def condition(obj: Any, kind: str) -> str | None:
    """The status ('True'/'False'/'Unknown') of condition `kind` on an object, or None."""
    for item in (obj or {}).get("status", {}).get("conditions", []) or []:
        if item.get("type") == kind:
            return str(item.get("status"))
    return None


# ScheduledJobs and their Jobs, as the tests build and read them

LABEL = "cronlease.io/scheduledjob"


def scheduledjob(
    name: str,
    namespace: str,
    duration: str = "0s",
    *,
    result: str = "Succeeded",
    fail_attempts: Sequence[int] = (),
    exit_code: int | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A ScheduledJob whose pods kwok plays (see pod_template); `spec` adds to its spec."""
    template = pod_template(duration, result, fail_attempts=fail_attempts, exit_code=exit_code)
    return {
        "apiVersion": "cronlease.io/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"jobTemplate": {"spec": {"backoffLimit": 0, "template": template}}, **spec},
    }


def jobs_of(kube: Kube, namespace: str, name: str) -> list[dict[str, Any]]:
    return kube.items("jobs", namespace, f"{LABEL}={name}")


def is_active(job: dict[str, Any]) -> bool:
    finished = condition(job, "Complete") == "True" or condition(job, "Failed") == "True"
    return not finished and not job["metadata"].get("deletionTimestamp")


def status_of(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    obj = kube.get("scheduledjob", name, namespace) or {}
    status: dict[str, Any] = obj.get("status") or {}
    return status


def events_of(kube: Kube, namespace: str, name: str) -> list[dict[str, Any]]:
    selector = f"involvedObject.name={name},involvedObject.kind=ScheduledJob"
    items: list[dict[str, Any]] = kube.json(
        "get", "events", "-n", namespace, "--field-selector", selector
    )["items"]
    return items


def reasons(kube: Kube, namespace: str, name: str) -> set[str]:
    return {event["reason"] for event in events_of(kube, namespace, name)}


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def scheduled_at(job: dict[str, Any]) -> datetime:
    return parse_time(job["metadata"]["annotations"]["cronlease.io/scheduled-at"])


def creation_time(obj: Any) -> datetime:
    return parse_time(obj["metadata"]["creationTimestamp"])


class Watch:
    """`kubectl get <kind> --watch` in a subprocess, writing to a file: every state of the selected
    objects in the order the API server stored them (a consistent list, then the watch from its
    resourceVersion), so a test judges what happened after the fact instead of by polling."""

    def __init__(self, kube: Kube, kind: str, namespace: str, *selector: str) -> None:
        self._output = tempfile.TemporaryFile()  # noqa: SIM115 (closed by stop())
        command = [kube.binary, "--kubeconfig", str(kube.kubeconfig), "get", kind]
        command += ["-n", namespace, *(["-l", ",".join(selector)] if selector else [])]
        self._process = subprocess.Popen(
            [*command, "--watch", "--output-watch-events", "-o", "json"],
            stdout=self._output,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "KUBECTL_KUBERC": "false"},
        )
        self._events: list[dict[str, Any]] | None = None

    def events(self) -> list[dict[str, Any]]:
        """The watch events so far ({"type": ADDED/MODIFIED/DELETED, "object": ...}), in order."""
        if self._events is not None:
            return self._events
        self._output.seek(0)
        text = self._output.read().decode(errors="replace")
        decoder, position, events = json.JSONDecoder(), 0, []
        while True:
            while position < len(text) and text[position].isspace():
                position += 1
            if position >= len(text):
                break
            try:
                event, position = decoder.raw_decode(text, position)
            except json.JSONDecodeError:
                break  # the document kubectl is still writing
            events.append(event)
        return events

    def stop(self) -> list[dict[str, Any]]:
        if self._events is None:
            self._process.terminate()
            self._process.wait(timeout=10)
            self._events = self.events()
            self._output.close()
        return self._events

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def states(events: list[dict[str, Any]]) -> list[dict[str, dict[str, Any]]]:
    """The objects present after each watch event, by name: the history the events replay."""
    present: dict[str, dict[str, Any]] = {}
    history = []
    for event in events:
        obj = event.get("object") or {}
        name = obj.get("metadata", {}).get("name")
        if event.get("type") == "DELETED":
            present.pop(name, None)
        elif event.get("type") in ("ADDED", "MODIFIED"):
            present[name] = obj
        history.append(dict(present))
    return history


def finished(history: list[dict[str, dict[str, Any]]]) -> list[str]:
    """Names of the Jobs finished in the last state of a replayed watch (see states())."""
    present = history[-1] if history else {}
    return [name for name, job in present.items() if not is_active(job)]


def wait_until(instant: datetime) -> None:
    """Let wall-clock time pass up to `instant`: the scenario needs slots to go by (not a sync)."""
    remaining = (instant - datetime.now(UTC)).total_seconds()
    if remaining > 0:
        time.sleep(remaining)


# --- accounts, their rights, and what the fence and the heartbeat policies make of their writes -

# The release's ServiceAccount, as the API server names it: the one writer the fence trusts.
OPERATOR = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{RELEASE}"
# The chart's heartbeat role as a service_account() binding: (kind, name, a permission it grants
# that no other role of the tests does).
HEARTBEAT_ROLE = ("ClusterRole", "cronlease-heartbeat", "patch leases")


def can(who: Kube, namespace: str, verb: str, resource: str, *flags: str) -> bool:
    """`kubectl auth can-i` as `who`: whether RBAC grants it `verb` on `resource` now."""
    answer = who.run("auth", "can-i", verb, resource, *flags, "-n", namespace, check=False)
    return answer.stdout.strip() == "yes"


def service_account(kube: Kube, namespace: str, name: str, *bindings: tuple[str, str, str]) -> Kube:
    """kubectl as a new ServiceAccount (a token not bound to a pod), bound in `namespace` to each
    (kind, role, permission) of `bindings`. The authorizer learns of a binding from its watch, a
    moment after the create: each binding's permission ("verb resource", one that role grants)
    is polled for with `auth can-i` before the account is used."""
    kube.run("create", "serviceaccount", name, "-n", namespace)
    for kind, role, _ in bindings:
        kube.run(
            "create", "rolebinding", f"{name}-{role}", f"--{kind.lower()}={role}",
            f"--serviceaccount={namespace}:{name}", "-n", namespace,
        )  # fmt: skip
    account = kube.as_token(kube.run("create", "token", name, "-n", namespace).stdout.strip())
    for kind, role, permission in bindings:
        verb, resource = permission.split()
        wait_for(
            lambda verb=verb, resource=resource: can(account, namespace, verb, resource),
            10,
            f"{name}'s {kind} {role} to grant {permission}",
        )
    return account


def as_pod(kube: Kube, namespace: str, name: str, account: str = "stepper") -> Kube:
    """kubectl with a token bound to a pod named `name` (made here, of `account`, which holds the
    heartbeat role): what the API server sees of a step's heartbeat sidecar."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}}
    pod["spec"] = {**pod_template("600s")["spec"], "serviceAccountName": account}
    made = json.loads(kube.run("create", "-f", "-", "-o", "json", stdin=json.dumps(pod)).stdout)
    token = kube.run(
        "create", "token", account, "-n", namespace, "--bound-object-kind=Pod",
        f"--bound-object-name={name}", f"--bound-object-uid={made['metadata']['uid']}",
    ).stdout.strip()  # fmt: skip
    return kube.as_token(token)


def step_lease(namespace: str, name: str, owner: dict[str, Any] | None = None) -> dict[str, Any]:
    """A step attempt's heartbeat Lease, named as its Job, as the operator makes it."""
    labels = {
        "cronlease.io/run": "close-1",
        "cronlease.io/step": "post",
        "cronlease.io/attempt": "1",
    }
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels}
    if owner:
        metadata["ownerReferences"] = [owner]
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 30},
    }


def renewal() -> str:
    """A heartbeat's merge patch: spec.renewTime, now."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return json.dumps({"spec": {"renewTime": now}})


def lease_call(
    who: Kube, namespace: str, verb: str, name: str, *args: str
) -> subprocess.CompletedProcess[str]:
    """`kubectl <verb> lease <name> <args>` in `namespace` as `who`, refused or not (for
    verdict())."""
    return who.run(verb, "lease", name, *args, "-n", namespace, check=False)


def verdict(result: subprocess.CompletedProcess[str]) -> str:
    """admitted, fenced (refused by cronlease's fence or its heartbeat policy), or the error the
    call met otherwise."""
    if result.returncode == 0:
        return "admitted"
    fenced = "cronlease fencing:" in result.stderr or "cronlease heartbeat:" in result.stderr
    return "fenced" if fenced else result.stderr.strip()


def verdicts(outcomes: dict[str, subprocess.CompletedProcess[str]]) -> dict[str, str]:
    """Compared whole, so that a failure shows every case at once."""
    return {case: verdict(result) for case, result in outcomes.items()}


# --- replicas and the Lease --------------------------------------------------------------------


def lease(kube: Kube) -> dict[str, Any]:
    spec: dict[str, Any] = (kube.get("lease", LEASE, OPERATOR_NAMESPACE) or {}).get("spec") or {}
    return spec


def holder(kube: Kube) -> str:
    return str(lease(kube).get("holderIdentity") or "")


def leader_of(replicas: list[OperatorProcess], kube: Kube) -> OperatorProcess:
    def find() -> OperatorProcess | None:
        current = holder(kube)
        return next((r for r in replicas if r.running and r.identity() == current), None)

    return wait_for(find, 3 * ELECTION["lease_duration"], "a replica to hold the Lease")


def takeover_seconds(kube: Kube, old: str, deadline: float) -> float:
    """Seconds until the Lease names a holder other than `old` (polled as fast as kubectl goes)."""
    start = time.monotonic()
    wait_for(lambda: holder(kube) not in ("", old), deadline, "another replica to take over", 0.02)
    return time.monotonic() - start


def wait_for_runs_by(leader: OperatorProcess, kube: Kube, namespace: str, name: str) -> None:
    """A new leader is acting: a Job of `name` written by it appears within 10 s."""
    wait_for(
        lambda: any(
            j["metadata"]["annotations"]["cronlease.io/leader"] == leader.identity()
            for j in jobs_of(kube, namespace, name)
        ),
        10,
        f"runs under {leader.name}",
    )


def assert_each_slot_once(jobs: list[dict[str, Any]], every: int) -> list[int]:
    """Every slot from the first Job's to the last's (`every` seconds apart) has exactly one Job:
    none doubled, none lost. Returns the slots, in epoch seconds, in order."""
    slots = sorted(int(scheduled_at(job).timestamp()) for job in jobs)
    assert len(slots) == len(set(slots)), "a slot ran twice"
    missing = sorted(set(range(slots[0], slots[-1] + 1, every)) - set(slots))
    assert missing == [], f"slots lost: {missing}"
    return slots
