"""Job bodies prepared before their slot (issue 34): built and serialised ahead, sent as they are.

At a shared slot every moment between the instant and the last Job's creation counts, and the
body of each Job (a deep copy of the template, the run's labels, annotations and environment,
the JSON) is known before the instant: what the instant alone knows is whether to run at all.
So the scheduler decides each due ScheduledJob a little ahead, as if at its instant, and builds
the bodies of the runs that decision would create (cronlease.shell.scheduler.Scheduler.prepare).

A prepared body is only a cache of `build_job`. The decision at the instant is made as always,
and a prepared body is sent only for a run that decision planned, equal in every field, built
from an equal template under the same leader and fencing token; anything else builds afresh.
So nothing prepared is created early, or for a run the instant refuses (Forbid, a suspension,
an edit), or under a term that has ended. Bodies nobody took are dropped: a slot's after
STALE_AFTER, all of them when this replica stops leading, and new ones are refused past LIMIT.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson

from cronlease.core.bodies.jobtemplate import build_job
from cronlease.core.decide.decision import PlannedRun, ScheduledJobView

# More prepared bodies than this are not kept (about 3 KB each): a burst larger than that has
# the rest built at the instant, as without preparation.
LIMIT = 10_000
# A body not taken this long after its run was due was refused at the instant (or its run
# decided otherwise): dropped.
STALE_AFTER = timedelta(seconds=60)


@dataclass(frozen=True, slots=True)
class _Prepared:
    uid: str  # the ScheduledJob's
    template: Any  # its spec.jobTemplate when built: equal, or the body is not this one's
    run: PlannedRun
    leader: str
    token: int
    body: bytes


class PreparedJobs:
    """Serialised Job bodies by namespace and Job name, each for one exact run."""

    def __init__(self, limit: int = LIMIT) -> None:
        self.limit = limit
        self._bodies: dict[tuple[str, str], _Prepared] = {}

    def __len__(self) -> int:
        return len(self._bodies)

    def put(self, sj: ScheduledJobView, run: PlannedRun, leader: str, token: int) -> bool:
        """Build and keep the body of `run`'s Job; False if the limit is reached."""
        key = (sj.namespace, run.job_name)
        if key not in self._bodies and len(self._bodies) >= self.limit:
            return False
        body = orjson.dumps(build_job(sj, run, leader, token))
        template = sj.spec.get("jobTemplate")
        self._bodies[key] = _Prepared(sj.uid, template, run, leader, token, body)
        return True

    def take(self, sj: ScheduledJobView, run: PlannedRun, leader: str, token: int) -> bytes | None:
        """The body prepared for exactly this run of this ScheduledJob, under this leader and
        token, from an equal template; None if there is none (it is then built at once).
        Taken once: a retry of the same create builds its own."""
        prepared = self._bodies.pop((sj.namespace, run.job_name), None)
        if (
            prepared is None
            or prepared.uid != sj.uid
            or prepared.run != run
            or (prepared.leader, prepared.token) != (leader, token)
            or prepared.template != sj.spec.get("jobTemplate")
        ):
            return None
        return prepared.body

    def drop_stale(self, now: datetime) -> None:
        """Forget the bodies of runs due STALE_AFTER ago or earlier: nobody took them."""
        cutoff = now - STALE_AFTER
        for key, prepared in list(self._bodies.items()):
            if (prepared.run.start or prepared.run.slot) <= cutoff:
                del self._bodies[key]

    def clear(self) -> None:
        self._bodies.clear()
