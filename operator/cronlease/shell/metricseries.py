"""Every series of the labelled counters, at 0 from the start of the process, on the leader and
on the standbys alike.

A counter's series that appears at its first increment has no earlier sample, so increase() and
rate() over it see nothing of that increment: the first skip of a reason after a restart or a
failover, exactly what an alert is for, would go unseen. So each label value the code can emit gets
its series when the process starts, taken from the enums and constants the call sites take them from
(tests/unit/shell/test_metric_series.py holds every `.labels(...)` call site against these).
"""

from __future__ import annotations

import platform

from prometheus_client import Counter

from cronlease.core.decide.decision import SkipReason
from cronlease.core.decide.supervision import Action, Escalation
from cronlease.core.names.jobinfo import JobState
from cronlease.core.names.naming import TRIGGERS
from cronlease.shell import metrics
from cronlease.shell.modelwatch import WATCH_OPERATION
from cronlease.shell.writer import Verb

# job_results' trigger for a finished Job whose annotations cronlease cannot vouch for (not
# written by its leader): its trigger annotation could say anything.
UNTRUSTED_TRIGGER = ""
RESULTS = tuple(state.value for state in JobState if state is not JobState.ACTIVE)


def label_values() -> dict[Counter, list[tuple[str, ...]]]:
    """Each labelled counter's label value tuples, in its labels' order."""
    return {
        metrics.slots_skipped: [(reason.value,) for reason in SkipReason],
        metrics.reconcile_errors: [*((verb.value,) for verb in Verb), (WATCH_OPERATION,)],
        metrics.job_results: [
            (result, trigger) for result in RESULTS for trigger in (*TRIGGERS, UNTRUSTED_TRIGGER)
        ],
        metrics.jobs_created: [(trigger,) for trigger in TRIGGERS],
        metrics.run_attempts: [(trigger,) for trigger in TRIGGERS],
        metrics.escalations: [(reason.value,) for reason in Escalation],
        metrics.step_attempts: [(action.value,) for action in Action],
    }


def initialise(version: str) -> None:
    """Before the metrics port opens: no scrape ever sees a counter without its zeros."""
    for counter, values in label_values().items():
        for labels in values:
            counter.labels(*labels)
    metrics.build_info.labels(version, platform.python_version()).set(1)
