"""A corpus of malformed ScheduledJobs (tests/e2e/invalid/), applied to the real control plane.

Each file is one manifest with a header saying what must happen to it:

    # expect: rejected <substring>       kubectl apply fails; stderr contains <substring>
    # expect: invalid-spec <substring>   accepted; the operator sets InvalidSpec=True with
                                         <substring> in its message and posts one Warning Event
    # pad: <dotted.path> <bytes>         (optional) set that string field to <bytes> characters,
                                         so that huge objects need no huge file
    # bug: <what is wrong>               (optional) a known operator bug: the case is xfail(strict)

Other comment lines describe the case. The metadata.namespace of a manifest is replaced by the
test's namespace. A last test applies every accepted-but-invalid object at once and checks that a
valid neighbour keeps running and the operator survives.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.replica import OperatorProcess
from kube import Kube, condition, events_of, jobs_of, scheduledjob, wait_for

CORPUS = Path(__file__).with_name("invalid")
REJECTED, INVALID_SPEC = "rejected", "invalid-spec"
# How long the operator has to report an accepted object as InvalidSpec.
REPORT_DEADLINE = 20.0
# After the first InvalidSpec Event, how long to watch for a duplicate.
SETTLE = 1.5


@dataclass(frozen=True)
class Case:
    """One corpus file: the manifest and what must happen to it."""

    file: str
    outcome: str
    substring: str
    manifest: dict[str, Any]
    bug: str | None = None

    @property
    def name(self) -> str:
        return str(self.manifest["metadata"]["name"])

    def in_namespace(self, namespace: str) -> dict[str, Any]:
        manifest = copy.deepcopy(self.manifest)
        manifest.setdefault("metadata", {})["namespace"] = namespace
        return manifest


def _pad(manifest: dict[str, Any], dotted: str, size: int) -> None:
    """Set the string at `dotted` (a path of keys) to `size` characters."""
    *parents, leaf = dotted.split(".")
    node = manifest
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = "x" * size


def load_case(path: Path) -> Case:
    text = path.read_text()
    manifest = yaml.safe_load(text)
    outcome = substring = ""
    bug: str | None = None
    for line in text.splitlines():
        if line.startswith("# expect: "):
            outcome, _, substring = line.removeprefix("# expect: ").partition(" ")
        elif line.startswith("# pad: "):
            dotted, size = line.removeprefix("# pad: ").split()
            _pad(manifest, dotted, int(size))
        elif line.startswith("# bug: "):
            bug = line.removeprefix("# bug: ").strip()
    return Case(path.stem, outcome, substring.strip(), manifest, bug)


CASES = [load_case(path) for path in sorted(CORPUS.glob("*.yaml"))]


def cases(outcome: str) -> list[Any]:
    return [
        pytest.param(
            case,
            id=case.file,
            marks=[pytest.mark.xfail(strict=True, reason=f"BUG: {case.bug}")] if case.bug else [],
        )
        for case in CASES
        if case.outcome == outcome
    ]


def invalid_spec_condition(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    """The InvalidSpec condition of the object if it is True, else None."""
    obj = kube.get("scheduledjob", name, namespace) or {}
    for item in (obj.get("status") or {}).get("conditions") or []:
        if item.get("type") == "InvalidSpec" and item.get("status") == "True":
            return dict(item)
    return None


def invalid_spec_events(kube: Kube, namespace: str, name: str) -> list[dict[str, Any]]:
    return [event for event in events_of(kube, namespace, name) if event["reason"] == "InvalidSpec"]


def assert_reported_once(kube: Kube, namespace: str, case: Case) -> None:
    """InvalidSpec=True naming the problem, Ready=False, one Warning Event, no Job."""
    invalid = invalid_spec_condition(kube, namespace, case.name)
    assert invalid is not None, f"{case.file}: InvalidSpec is not True"
    assert case.substring in invalid["message"], invalid
    assert condition(kube.get("scheduledjob", case.name, namespace), "Ready") == "False"
    events = invalid_spec_events(kube, namespace, case.name)
    assert len(events) == 1, [(e["type"], e["message"], e.get("count")) for e in events]
    assert events[0]["type"] == "Warning"
    assert events[0].get("count", 1) == 1
    assert case.substring in events[0]["message"], events[0]["message"]
    assert jobs_of(kube, namespace, case.name) == []


def test_the_corpus_is_well_formed() -> None:
    assert len(CASES) >= 50
    for case in CASES:
        assert case.outcome in (REJECTED, INVALID_SPEC), case.file
        assert case.substring, f"{case.file}: the expect line names no substring"
        assert case.manifest.get("kind") == "ScheduledJob", case.file
    names = [case.name for case in CASES if case.outcome == INVALID_SPEC]
    assert len(names) == len(set(names)), "accepted objects share a namespace in the last test"


@pytest.mark.parametrize("case", cases(REJECTED))
def test_rejected_at_apply(kube: Kube, namespace: str, crd: str, case: Case) -> None:
    result = kube.apply(case.in_namespace(namespace), check=False)
    assert result.returncode != 0, f"accepted: {result.stdout.strip()}"
    assert case.substring in result.stderr, result.stderr
    assert kube.items("scheduledjobs", namespace) == []


@pytest.mark.parametrize("case", cases(INVALID_SPEC))
def test_accepted_and_reported_as_invalid_spec(
    kube: Kube, namespace: str, operator: OperatorProcess, case: Case
) -> None:
    result = kube.apply(case.in_namespace(namespace), check=False)
    assert result.returncode == 0, result.stderr
    wait_for(
        lambda: invalid_spec_condition(kube, namespace, case.name),
        REPORT_DEADLINE,
        f"InvalidSpec=True on {case.name}",
    )
    wait_for(
        lambda: invalid_spec_events(kube, namespace, case.name),
        REPORT_DEADLINE,
        f"an InvalidSpec Event on {case.name}",
    )
    time.sleep(SETTLE)  # give a duplicate Event time to show up
    assert_reported_once(kube, namespace, case)
    assert operator.running


def test_invalid_objects_do_not_disturb_a_valid_neighbour(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    accepted = [case for case in CASES if case.outcome == INVALID_SPEC]
    for case in accepted:
        result = kube.apply(case.in_namespace(namespace), check=False)
        assert result.returncode == 0, f"{case.file}: {result.stderr}"
    reportable = [case for case in accepted if case.bug is None]
    wait_for(
        lambda: all(invalid_spec_condition(kube, namespace, c.name) for c in reportable),
        REPORT_DEADLINE,
        "every accepted-but-invalid object to be marked InvalidSpec",
    )
    kube.apply(
        scheduledjob(
            "valid-neighbour", namespace, schedule="*/2 * * * * *", successfulJobsHistoryLimit=10
        )
    )
    wait_for(
        lambda: len(jobs_of(kube, namespace, "valid-neighbour")) >= 2,
        15,
        "2 Jobs of the valid neighbour",
    )
    assert operator.running
    # By now every invalid object has been through many reconciles: still one Event each.
    for case in reportable:
        assert_reported_once(kube, namespace, case)
