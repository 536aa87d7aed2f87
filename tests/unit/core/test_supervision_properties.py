"""supervise() against a simulated world (issue 17): whatever happens in whatever order (Jobs
that end well or badly, silent heartbeats, a user's deletions, lost status writes, watch events
late), every step attempt runs at most once, a finished step never runs again, compensation
undoes only finished steps, newest first, and every run ends."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import hypothesis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cronlease.core.decide.supervision import Action, RunView, StepJob, supervise
from cronlease.core.names.jobinfo import NOT_RETRYABLE, JobState
from cronlease.core.specs.policies import RetryPolicy
from cronlease.core.specs.steps import Compensation, OnFailure, Step, Steps, snapshot

T0 = datetime(2026, 12, 1, tzinfo=UTC)
TEMPLATE = {"spec": {"template": {}}}
FINAL = {"Succeeded", "Failed", "Compensated", "CompensationFailed"}


@st.composite
def step_lists(draw: st.DrawFn) -> Steps:
    count = draw(st.integers(1, 5))
    steps = []
    for index in range(count):
        earlier = [f"s{i}" for i in range(index)]
        steps.append(
            Step(
                name=f"s{index}",
                job_template=TEMPLATE,
                depends_on=tuple(draw(st.lists(st.sampled_from(earlier), unique=True)))
                if earlier
                else (),
                retry=RetryPolicy(
                    max_attempts=draw(st.integers(1, 3)),
                    initial_seconds=draw(st.sampled_from([0, 5])),
                ),
                heartbeat_seconds=draw(st.sampled_from([None, 10])),
                compensate=Compensation(TEMPLATE, RetryPolicy(max_attempts=draw(st.integers(1, 2))))
                if draw(st.sampled_from([True, True, True, False]))
                else None,
            )
        )
    return Steps(tuple(steps), draw(st.sampled_from(list(OnFailure))))


@dataclass
class World:
    steps: Steps
    now: datetime = T0
    status: dict[str, Any] = field(default_factory=dict)
    jobs: dict[str, StepJob] = field(default_factory=dict)  # what exists in the API
    hidden: set[str] = field(default_factory=set)  # created, watch event not in yet
    fresh: set[str] = field(default_factory=set)  # created by the last plan applied
    gone: set[str] = field(default_factory=set)  # existed, deleted for good
    renewed: dict[str, datetime] = field(default_factory=dict)
    # Each succeeded step's completion as its status first recorded it: when its Job finished,
    # then the order it was seen in (several can first be seen succeeded in one pass, and a Job
    # seen late may have finished before one seen earlier).
    completions: dict[str, tuple[str, int]] = field(default_factory=dict)
    compensated: list[str] = field(default_factory=list)  # compensations, in creation order

    def view(self) -> list[StepJob]:
        return [job for name, job in self.jobs.items() if name not in self.hidden]

    def supervise(self, lose_write: bool) -> None:
        self.fresh -= {name for name in self.fresh if name not in self.hidden}  # seen now
        before = copy.deepcopy(self.status)
        plan = supervise(
            RunView("close", "bank", "run-uid", snapshot(self.steps), before),
            self.view(),
            self.renewed,
            self.now,
        )
        check_status(before, plan.status)
        if lose_write:
            return  # the claim never reached etcd: nothing after it happens
        self.status = plan.status
        current = current_attempts(self.status)
        for job in plan.deletions:
            if job.name in self.jobs:
                self.jobs[job.name] = replace(self.jobs[job.name], deleting=True)
        for planned in plan.creations:
            key = (planned.step, planned.action, planned.attempt)
            assert current.get(key[:2]) == (planned.attempt, "Running"), "only a claimed attempt"
            name = f"{planned.step}-{planned.action.value}-{planned.attempt}"
            assert name not in self.gone, f"attempt {name} ran twice"
            if planned.action is Action.RUN:
                entry = next(e for e in self.status["steps"] if e["name"] == planned.step)
                assert entry["phase"] == "Running"
            else:
                self.compensated.append(planned.step)
                running = [n for n, j in self.jobs.items()
                           if j.action is Action.RUN and j.state is JobState.ACTIVE]  # fmt: skip
                assert not running, f"compensating while {running} still run"
            self.fresh.add(name)
            if name not in self.jobs:  # else AlreadyExists: the same Job
                self.jobs[name] = StepJob(
                    name, name, "run-uid", planned.step, planned.action, planned.attempt,
                    JobState.ACTIVE, held=True,
                )  # fmt: skip
            self.hidden.discard(name)
        for job in plan.releases:
            if job.name in self.jobs:
                released = replace(self.jobs[job.name], held=False)
                self.jobs[job.name] = released
                if released.deleting:
                    del self.jobs[job.name]
                    self.gone.add(job.name)
        for entry in self.status.get("steps", []):
            if entry["phase"] == "Succeeded" and entry["name"] not in self.completions:
                finished = (entry.get("finishedAt", ""), int(entry.get("order", 0)))
                self.completions[entry["name"]] = finished


def current_attempts(status: dict[str, Any]) -> dict[tuple[str, Action], tuple[int, str]]:
    found = {}
    for entry in status.get("steps", []):
        found[(entry["name"], Action.RUN)] = (entry["attempt"], entry["phase"])
        compensation = entry.get("compensation")
        if compensation:
            found[(entry["name"], Action.COMPENSATE)] = (
                compensation["attempt"],
                compensation["phase"],
            )
    return found


def check_status(before: dict[str, Any], after: dict[str, Any]) -> None:
    old = {e["name"]: e for e in before.get("steps", [])}
    for entry in after.get("steps", []):
        previous = old.get(entry["name"])
        if previous is None:
            continue
        assert entry["attempt"] >= previous["attempt"], "an attempt went back"
        assert entry["attempt"] <= previous["attempt"] + 1, "an attempt was skipped"
        if previous["phase"] == "Succeeded":
            assert entry["phase"] == "Succeeded", "a finished step ran again"
    if before.get("phase") in FINAL:
        assert after.get("phase") == before["phase"]
    if after.get("phase") == "Succeeded":
        assert all(e["phase"] == "Succeeded" for e in after["steps"])


EVENTS = st.sampled_from(
    ["supervise", "supervise", "supervise", "lost-write", "succeed", "succeed", "fail",
     "fail-for-good", "tick", "beat", "delete", "late-watch"]
)  # fmt: skip


@example(
    steps=Steps(
        tuple(
            Step(name, TEMPLATE, compensate=Compensation(TEMPLATE, RetryPolicy(max_attempts=1)))
            for name in ("s0", "s1", "s2")
        )
    ),
    events=[("supervise", 0), ("succeed", 1), ("tick", 1)],
    doomed=2,
    undo_fails=False,
)  # s1 finishes, then s0 two seconds later: both first seen succeeded in one pass
@example(
    steps=Steps(
        (
            Step("s0", TEMPLATE),
            Step("s1", TEMPLATE, compensate=Compensation(TEMPLATE, RetryPolicy(max_attempts=2))),
            Step("s2", TEMPLATE),
        )
    ),
    events=[("supervise", 0), ("succeed", 1), ("fail", 0), ("supervise", 0), ("fail", 0)],
    doomed=6,
    undo_fails=False,
)  # a compensation that fails once, then succeeds
@given(
    steps=step_lists(),
    events=st.lists(st.tuples(EVENTS, st.integers(0, 9)), max_size=60),
    doomed=st.integers(0, 6),
    undo_fails=st.booleans(),
)
@settings(
    max_examples=600,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
def test_every_attempt_runs_once_and_every_run_ends(
    steps: Steps, events: list[tuple[str, int]], doomed: int, undo_fails: bool
) -> None:
    world = World(steps)
    for event, pick in events:
        active = sorted(n for n, j in world.jobs.items() if j.state is JobState.ACTIVE)
        target = active[pick % len(active)] if active else None
        if event in ("supervise", "lost-write"):
            world.supervise(lose_write=event == "lost-write")
        elif event == "tick":  # time passes: every watch event is in
            world.now += timedelta(seconds=pick * 2)
            world.hidden.clear()
        elif target is None:
            continue
        elif event == "beat":
            world.renewed[target] = world.now
        elif event == "delete":  # a held Job waits for its release; any other goes at once
            if world.jobs[target].held:
                world.jobs[target] = replace(world.jobs[target], deleting=True)
            else:
                del world.jobs[target]
                world.gone.add(target)
        elif event == "late-watch":  # a Job just created, its watch event not in yet
            if target in world.fresh:
                world.hidden.add(target)
        else:
            state = JobState.SUCCEEDED if event == "succeed" else JobState.FAILED
            reason = NOT_RETRYABLE if event == "fail-for-good" else "BackoffLimitExceeded"
            world.jobs[target] = replace(
                world.jobs[target], state=state, finished_at=world.now, failure_reason=reason
            )
    # Then the world settles: watches catch up, time passes, every Job succeeds but those of
    # the doomed step (if it is one of them), and the compensations if they are to fail.
    world.hidden.clear()
    for _ in range(200):
        if world.status.get("phase") in FINAL:
            break
        for name, job in list(world.jobs.items()):
            if job.state is not JobState.ACTIVE:
                continue
            compensating = job.action is Action.COMPENSATE
            fails = undo_fails if compensating else job.step == f"s{doomed}"
            state = JobState.FAILED if fails else JobState.SUCCEEDED
            world.jobs[name] = replace(job, state=state, finished_at=world.now)
        world.now += timedelta(seconds=5)
        world.supervise(lose_write=False)
    assert world.status.get("phase") in FINAL, world.status
    newest_first = sorted(world.completions, key=world.completions.__getitem__, reverse=True)
    order = [s for s in newest_first if steps.step(s).compensate]  # type: ignore[union-attr]
    hypothesis.event(f"compensations: {len(set(world.compensated))}")
    hypothesis.event(f"phase: {world.status.get('phase')}")
    started = list(dict.fromkeys(world.compensated))  # a retried compensation starts once
    assert started == order[: len(started)], "newest first, finished steps only"
