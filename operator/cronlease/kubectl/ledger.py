"""The slot ledger (`kubectl cronlease audit`): every slot of a window, and what became of it.

Pure: the shell gathers the facts (the schedule's slots, the runs the Jobs and status show, the
skip Events, the status counters) and `build_ledger` judges each slot:

- ran: exactly one run (a cronlease Job, a recentRuns entry, or a Job of the CronJob it took over
  from, which shares the Job name of the slot: `cronlease.core.names.naming.scheduled_job_name`);
- doubled: two or more distinct runs;
- skipped: no run, at or before the cursor, and a skip the operator counted explains it;
- no record: no run and no skip left to explain it, but the status counted a run whose Job is
  gone (history limits, TTL): most likely that run;
- missing: none of these. The operator's promise is that every slot up to its cursor ran or was
  counted as skipped; a slot nothing accounts for breaks it;
- and, not judged: before (the ScheduledJob's first slot comes later), waiting (buffered), due
  (after the cursor: not processed yet), future.

Skips are explained by count, not by name: the operator keeps per-reason counters
(`status.slotsSkipped`, over its whole life) and one aggregated Event per reason whose message
names the latest slot skipped. A slot is given the reason of the Event that covers it most
closely (its latest skipped slot at or after the slot), newest slot first, each reason no more
often than its counter allows; a slot no Event covers (expired after an hour) takes a reason
that still has count left. So the check is exact when the facts span the ScheduledJob's life and
its Jobs are kept, and a necessary condition otherwise: missing is never said of a slot that some
count could explain.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime


class Verdict(enum.StrEnum):
    RAN = "ran"
    DOUBLED = "doubled"
    SKIPPED = "skipped"
    NO_RECORD = "no record"
    MISSING = "missing"
    BEFORE = "before start"
    WAITING = "waiting"
    DUE = "due"
    FUTURE = "future"


# Verdicts that make `audit` exit non-zero.
FAILING = frozenset({Verdict.DOUBLED, Verdict.MISSING})


@dataclass(frozen=True)
class RunRecord:
    """One run of a slot, as some record shows it. `run` identifies it (a run's attempts share
    it), so two records of one run are one run."""

    slot: datetime
    run: str
    job: str
    by: str = "cronlease"  # or "cronjob/<name>": the CronJob it took over from
    result: str = ""


@dataclass(frozen=True)
class SkipRecord:
    """A Skipped<Reason> Event: how often, and the latest slot its message names."""

    reason: str
    latest: datetime


@dataclass(frozen=True)
class Facts:
    slots: Sequence[datetime]  # the schedule's slots, ascending (the window, or the whole life)
    start: datetime | None  # slots at or before it were never this ScheduledJob's to run
    cursor: datetime | None  # status.processedUntil
    now: datetime
    runs: Sequence[RunRecord] = ()
    skips: Sequence[SkipRecord] = ()
    skipped_counts: Mapping[str, int] = field(default_factory=dict)  # status.slotsSkipped
    runs_gone: int = 0  # runs the status counted whose Jobs and entries are gone
    buffered: frozenset[datetime] = frozenset()


@dataclass(frozen=True)
class Entry:
    slot: datetime
    verdict: Verdict
    detail: str = ""
    runs: tuple[RunRecord, ...] = ()


@dataclass(frozen=True)
class Ledger:
    entries: tuple[Entry, ...]

    @property
    def counts(self) -> Counter[Verdict]:
        return Counter(entry.verdict for entry in self.entries)

    @property
    def ok(self) -> bool:
        return not any(entry.verdict in FAILING for entry in self.entries)

    def within(self, low: datetime, high: datetime) -> Ledger:
        """The entries of slots in [low, high]."""
        return Ledger(tuple(e for e in self.entries if low <= e.slot <= high))


def build_ledger(facts: Facts) -> Ledger:
    by_slot: dict[datetime, dict[str, RunRecord]] = {}
    for record in facts.runs:
        by_slot.setdefault(record.slot, {}).setdefault(record.run, record)
    verdicts: dict[datetime, Entry] = {}
    unrun: list[datetime] = []
    for slot in facts.slots:
        runs = tuple(sorted(by_slot.get(slot, {}).values(), key=lambda r: (r.by, r.run)))
        if len(runs) > 1:
            names = ", ".join(f"{r.job} ({r.by})" for r in runs)
            verdicts[slot] = Entry(slot, Verdict.DOUBLED, names, runs)
        elif runs:
            verdicts[slot] = Entry(slot, Verdict.RAN, _describe(runs[0]), runs)
        elif facts.start is not None and slot <= facts.start:
            verdicts[slot] = Entry(slot, Verdict.BEFORE)
        elif slot in facts.buffered:
            verdicts[slot] = Entry(slot, Verdict.WAITING, "in status.buffered")
        elif facts.cursor is None or slot > facts.cursor:
            verdict = Verdict.DUE if slot <= facts.now else Verdict.FUTURE
            verdicts[slot] = Entry(slot, verdict)
        else:
            unrun.append(slot)
    for slot, entry in _explain(unrun, facts).items():
        verdicts[slot] = entry
    return Ledger(tuple(verdicts[slot] for slot in facts.slots))


def _describe(record: RunRecord) -> str:
    text = record.job if record.by == "cronlease" else f"{record.job} ({record.by})"
    return f"{text} {record.result}".strip()


def _explain(unrun: list[datetime], facts: Facts) -> dict[datetime, Entry]:
    """Slots at or before the cursor that no record shows running: skips by count, then runs
    whose Jobs are gone, and the rest missing."""
    budget = Counter({r: c for r, c in facts.skipped_counts.items() if c > 0})
    latest: dict[str, list[datetime]] = {}
    for skip in facts.skips:
        latest.setdefault(skip.reason, []).append(skip.latest)
    explained: dict[datetime, Entry] = {}
    # Newest first: the Event closest after a slot is the likeliest to have skipped it.
    for slot in sorted(unrun, reverse=True):
        covering = [
            (min(t for t in times if t >= slot), reason)
            for reason, times in latest.items()
            if budget[reason] > 0 and any(t >= slot for t in times)
        ]
        if covering:
            _, reason = min(covering)
            budget[reason] -= 1
            explained[slot] = Entry(slot, Verdict.SKIPPED, reason)
    rest = [slot for slot in sorted(unrun, reverse=True) if slot not in explained]
    for slot in rest:
        left = sorted((reason for reason, count in budget.items() if count > 0))
        if left:
            budget[left[0]] -= 1
            explained[slot] = Entry(slot, Verdict.SKIPPED, f"{left[0]} (by count; Event gone)")
    gone = facts.runs_gone
    # Oldest first: history cleanup deletes the oldest runs.
    for slot in sorted(unrun):
        if slot in explained:
            continue
        if gone > 0:
            gone -= 1
            explained[slot] = Entry(slot, Verdict.NO_RECORD, "a counted run whose Job is gone")
        else:
            explained[slot] = Entry(slot, Verdict.MISSING, "no run, no skip counted")
    return explained
