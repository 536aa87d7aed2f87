"""audit: the slot ledger of one ScheduledJob, or of all (-A); exit 3 (a finding) if a slot is
missing or doubled, or an object cannot be audited (the verdicts are cronlease.kubectl.ledger's).
`-o name` lists the ScheduledJobs with a finding; `-o wide` adds the Jobs of each slot (one) or
every verdict's count (-A)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from cronlease.core.names.naming import GROUP, format_time
from cronlease.kubectl.context import Context
from cronlease.kubectl.errors import EXIT_FINDING, PluginError
from cronlease.kubectl.evidence import gather, subject_of
from cronlease.kubectl.ledger import FAILING, Ledger, Verdict, build_ledger
from cronlease.kubectl.output import colour, table
from cronlease.kubectl.window import check_name, parse_window

VERDICT_COLOURS = {
    Verdict.RAN: "green",
    Verdict.DOUBLED: "red",
    Verdict.MISSING: "red",
    Verdict.SKIPPED: "yellow",
    Verdict.NO_RECORD: "yellow",
}


def _audit_one(
    ctx: Context,
    obj: dict[str, Any],
    jobs: list[dict[str, Any]],
    events: list[dict[str, Any]],
    low: datetime,
    high: datetime,
) -> Ledger:
    subject = subject_of(obj)
    facts = gather(subject, jobs, events, low, high, ctx.clock())
    return build_ledger(facts).within(low, high)


def _ledger_data(subject_ns: str, name: str, ledger: Ledger) -> dict[str, Any]:
    return {
        "namespace": subject_ns,
        "name": name,
        "ok": ledger.ok,
        "counts": {verdict.value: count for verdict, count in sorted(ledger.counts.items())},
        "slots": [
            {
                "slot": format_time(e.slot),
                "verdict": e.verdict.value,
                "detail": e.detail,
                "jobs": [r.job for r in e.runs],
            }
            for e in ledger.entries
        ],
    }


def _summary(ledger: Ledger) -> str:
    counts = ledger.counts
    order = [
        Verdict.RAN,
        Verdict.SKIPPED,
        Verdict.NO_RECORD,
        Verdict.MISSING,
        Verdict.DOUBLED,
        Verdict.BEFORE,
        Verdict.WAITING,
        Verdict.DUE,
        Verdict.FUTURE,
    ]
    parts = [f"{counts[v]} {v.value}" for v in order if counts[v]]
    return f"{len(ledger.entries)} slot(s): {', '.join(parts) or 'none'}"


def cmd_audit(ctx: Context, name: str | None, low_text: str | None, high_text: str | None) -> int:
    now = ctx.clock()
    low, high = parse_window(low_text or "1h", high_text or "now", now)
    if name is None and not ctx.all_namespaces:
        raise PluginError("give a ScheduledJob's name, or -A for all of them")
    if name is not None:
        check_name(name)
        objects = [ctx.api.scheduled_job(ctx.ns, name)]
    else:
        objects = ctx.api.scheduled_jobs(None)
    jobs = ctx.api.jobs(None if name is None else ctx.ns)
    events = ctx.api.events(None if name is None else ctx.ns)
    results: list[tuple[dict[str, Any], Ledger | PluginError]] = []
    for obj in objects:
        try:
            results.append((obj, _audit_one(ctx, obj, jobs, events, low, high)))
        except PluginError as error:
            if name is not None:
                raise
            results.append((obj, error))
    failed = any(isinstance(r, PluginError) or not r.ok for _, r in results)
    if ctx.structured():
        data = [
            _ledger_data(o["metadata"]["namespace"], o["metadata"]["name"], r)
            if isinstance(r, Ledger)
            else {
                "namespace": o["metadata"]["namespace"],
                "name": o["metadata"]["name"],
                "ok": False,
                "error": str(r),
            }
            for o, r in results
        ]
        ctx.emit(data[0] if name is not None else data)
        return EXIT_FINDING if failed else 0
    if ctx.output == "name":
        failing = [o for o, r in results if isinstance(r, PluginError) or not r.ok]
        ctx.names(f"scheduledjob.{GROUP}", [o["metadata"]["name"] for o in failing])
        return EXIT_FINDING if failed else 0
    if name is not None:
        ((obj, ledger),) = results
        assert isinstance(ledger, Ledger)
        ctx.print(f"scheduledjob/{name} slots from {format_time(low)} to {format_time(high)}")
        headers = ["SLOT", "VERDICT", "DETAIL"]
        rows = [[format_time(e.slot), e.verdict.value, e.detail] for e in ledger.entries]
        if ctx.wide:
            headers.append("JOBS")
            for row, entry in zip(rows, ledger.entries, strict=True):
                row.append(",".join(r.job for r in entry.runs))
        colours = [VERDICT_COLOURS.get(e.verdict, "") for e in ledger.entries]
        if rows:
            ctx.print(table(headers, rows, colours, ctx.colour))
        line = _summary(ledger)
        ctx.print(colour(line, "green" if ledger.ok else "red", ctx.colour))
        return 0 if ledger.ok else EXIT_FINDING
    counted = [*_COUNTED, *(_WIDE_COUNTED if ctx.wide else ())]
    rows = []
    for obj, result in results:
        meta = obj["metadata"]
        if isinstance(result, PluginError):
            blank = [""] * (len(counted) + 1)
            rows.append([meta["namespace"], meta["name"], *blank, f"error: {result}"])
            continue
        c = result.counts
        bad = sum(c[v] for v in FAILING)
        rows.append(
            [
                meta["namespace"],
                meta["name"],
                str(len(result.entries)),
                *(str(c[v]) for v in counted),
                "ok" if not bad else "FAILED",
            ]
        )
    headers = ["NAMESPACE", "NAME", "SLOTS", *(v.value.upper().replace(" ", "-") for v in counted)]
    headers.append("AUDIT")
    ctx.print(f"slots from {format_time(low)} to {format_time(high)}")
    ctx.print(table(headers, rows))
    return EXIT_FINDING if failed else 0


# The verdicts -A counts in its columns; -o wide adds the rest.
_COUNTED = (Verdict.RAN, Verdict.SKIPPED, Verdict.MISSING, Verdict.DOUBLED)
_WIDE_COUNTED = (Verdict.NO_RECORD, Verdict.BEFORE, Verdict.WAITING, Verdict.DUE, Verdict.FUTURE)
