"""The plugin's commands on a fake of `cronlease.kubectl.client.Api` (no client, no cluster): the
order of adopt's writes (the CronJob suspended before the ScheduledJob exists, the cursor at the
CronJob's last slot including a Job that landed after its status, the annotation removed once the
operator has decided), adopt's clock (the API server's, whatever the host's says), a dry run's
manifest applied later (the operator's own decision on it), and run-now's verdicts."""

from __future__ import annotations

import copy
import io
import json
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

import pytest
import yaml

from cronlease.core.decide.decision import ScheduledJobView
from cronlease.core.decide.reconcile import decide
from cronlease.core.names.naming import format_time, manual_job_name
from cronlease.kubectl import adopt, commands, context
from cronlease.kubectl.errors import PluginError

if TYPE_CHECKING:  # the client itself is not installed here (the operator's environment)
    from cronlease.kubectl.client import Api

NOW = datetime(2026, 12, 1, 12, 0, 30, tzinfo=UTC)
HOUR = timedelta(hours=1)


class FakeApi:
    """What the commands call, recording every write in order; `on_create` plays the operator."""

    default_namespace = "team"

    def __init__(self) -> None:
        self.writes: list[tuple[str, str, dict[str, Any]]] = []
        self.cronjobs: dict[str, dict[str, Any]] = {}
        self.sjs: dict[str, dict[str, Any]] = {}
        self.job_list: list[dict[str, Any]] = []
        self.operator_decides = True
        self.admits_run_now = True
        self.refuse_creation = ""
        self.server_time = NOW  # the API server's clock (the Date of its answers)

    def server_now(self) -> datetime:
        return self.server_time

    def cronjob(self, namespace: str, name: str) -> dict[str, Any]:
        if name not in self.cronjobs:
            raise PluginError(f"cronjob {name!r} in namespace {namespace!r} not found")
        return self.cronjobs[name]

    def patch_cronjob(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        self.writes.append(("patch-cronjob", name, patch))
        self.cronjobs[name]["spec"].update(patch["spec"])
        return self.cronjobs[name]

    def jobs(self, namespace: str | None, selector: str = "") -> list[dict[str, Any]]:
        return self.job_list

    def job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return next((j for j in self.job_list if j["metadata"]["name"] == name), None)

    def scheduled_job(self, namespace: str, name: str) -> dict[str, Any]:
        if name not in self.sjs:
            raise PluginError(f"scheduledjob {name!r} in namespace {namespace!r} not found")
        return self.sjs[name]

    def create_scheduled_job(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.refuse_creation:
            raise PluginError(self.refuse_creation)
        self.writes.append(("create-sj", body["metadata"]["name"], body))
        stamped = {"uid": "sj-uid", "creationTimestamp": format_time(self.server_time)}
        created = {**body, "metadata": {**body["metadata"], **stamped}, "status": {}}
        if self.operator_decides:
            created["status"] = {"observedSchedule": "x", "processedUntil": "y"}
        self.sjs[body["metadata"]["name"]] = created
        return created

    def patch_scheduled_job(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self.writes.append(("patch-sj", name, patch))
        token = patch.get("metadata", {}).get("annotations", {}).get("cronlease.io/run-now")
        if token:  # the operator takes it at once
            self.sjs[name]["status"] = {"runNowToken": token}
            if self.admits_run_now:
                self.job_list.append({"metadata": {"name": manual_job_name(name, token)}})


def make_context(
    api: FakeApi, output: str = "table", host_clock: datetime = NOW
) -> tuple[context.Context, io.StringIO]:
    out = io.StringIO()
    ctx = context.Context(
        connect=lambda: cast("Api", api),
        namespace=None,
        all_namespaces=False,
        output=output,
        out=out,
        err=io.StringIO(),
        colour=False,
        timeout=2,
        clock=lambda: host_clock,
    )
    return ctx, out


def a_cronjob(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "nightly",
            "namespace": "team",
            "uid": "cj-uid",
            "creationTimestamp": "2026-11-01T00:00:00Z",
        },
        "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {}}}, **spec},
        "status": {"lastScheduleTime": "2026-12-01T11:59:00Z"},
    }


def cronjob_job(minute: int) -> dict[str, Any]:
    slot = datetime(2026, 12, 1, 11, 0, tzinfo=UTC) + timedelta(minutes=minute)
    return {
        "metadata": {
            "name": f"nightly-{int(slot.timestamp()) // 60}",
            "annotations": {
                "batch.kubernetes.io/cronjob-scheduled-timestamp": slot.strftime(
                    "%Y-%m-%dT%H:%M:%SZ"
                )
            },
            "ownerReferences": [
                {"kind": "CronJob", "name": "nightly", "uid": "cj-uid", "controller": True}
            ],
        },
        "status": {"conditions": [{"type": "Complete", "status": "True"}]},
    }


@pytest.fixture(autouse=True)
def no_settling(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(adopt, "SETTLE_SECONDS", 0.0)
    monkeypatch.setattr(context, "POLL_SECONDS", 0.01)


def test_adopt_suspends_first_seeds_the_cursor_then_clears_the_seed() -> None:
    api = FakeApi()
    api.cronjobs["nightly"] = a_cronjob()
    # A Job the CronJob created after its status said 11:59: the cursor must not be before it.
    api.job_list = [cronjob_job(58), cronjob_job(59), cronjob_job(60)]
    ctx, out = make_context(api)

    assert adopt.cmd_adopt(ctx, "cronjob/nightly", dry_run=False, zone="UTC") == 0

    kinds = [(kind, name) for kind, name, _ in api.writes]
    assert kinds == [
        ("patch-cronjob", "nightly"),
        ("create-sj", "nightly"),
        ("patch-sj", "nightly"),
    ]
    assert api.writes[0][2] == {"spec": {"suspend": True}}
    created = api.writes[1][2]
    assert created["metadata"]["annotations"]["cronlease.io/start-after"] == "2026-12-01T12:00:00Z"
    assert created["metadata"]["annotations"]["cronlease.io/adopted-from"] == "cronjob/nightly"
    assert "suspend" not in created["spec"]  # the CronJob was suspended by adopt, not its owner
    assert api.writes[2][2] == {"metadata": {"annotations": {"cronlease.io/start-after": None}}}
    assert "took over from cronjob.batch/nightly" in out.getvalue()


def test_adopt_keeps_a_suspension_its_owner_chose() -> None:
    api = FakeApi()
    api.cronjobs["nightly"] = a_cronjob(suspend=True)
    ctx, _ = make_context(api)
    adopt.cmd_adopt(ctx, "cronjob/nightly", dry_run=False, zone="UTC")
    assert [kind for kind, _, _ in api.writes] == ["create-sj", "patch-sj"]
    assert api.writes[0][2]["spec"]["suspend"] is True


def test_adopt_refuses_an_existing_scheduled_job_before_any_write() -> None:
    api = FakeApi()
    api.cronjobs["nightly"] = a_cronjob()
    api.sjs["nightly"] = {"metadata": {"name": "nightly"}}
    ctx, _ = make_context(api)
    with pytest.raises(PluginError, match="scheduledjob/nightly exists already"):
        adopt.cmd_adopt(ctx, "cronjob/nightly", dry_run=False, zone="UTC")
    assert api.writes == []


def test_adopt_without_an_operator_times_out_with_the_seed_in_place() -> None:
    api = FakeApi()
    api.cronjobs["nightly"] = a_cronjob()
    api.operator_decides = False
    ctx, _ = make_context(api)
    with pytest.raises(PluginError, match="waiting for the operator's first decision"):
        adopt.cmd_adopt(ctx, "cronjob/nightly", dry_run=False, zone="UTC")
    # The seed stays: the operator's first decision, whenever it comes, starts from it.
    assert [kind for kind, _, _ in api.writes] == ["patch-cronjob", "create-sj"]


def test_a_refused_creation_resumes_the_cronjob_it_suspended() -> None:
    api = FakeApi()
    api.cronjobs["nightly"] = a_cronjob()
    api.refuse_creation = "scheduledjob 'nightly': forbidden (403)"
    ctx, _ = make_context(api)
    with pytest.raises(PluginError, match=r"\(cronjob/nightly resumed: nothing was handed over\)"):
        adopt.cmd_adopt(ctx, "cronjob/nightly", dry_run=False, zone="UTC")
    assert [patch for kind, _, patch in api.writes] == [
        {"spec": {"suspend": True}},
        {"spec": {"suspend": False}},
    ]


def test_a_dry_run_writes_nothing() -> None:
    api = FakeApi()
    api.cronjobs["nightly"] = a_cronjob()
    ctx, out = make_context(api)
    assert adopt.cmd_adopt(ctx, "cronjob/nightly", dry_run=True, zone="UTC") == 0
    assert api.writes == []
    assert "kind: ScheduledJob" in out.getvalue()
    assert "# What differs from the CronJob" in out.getvalue()


def _dry_run_manifest(text: str, output: str) -> dict[str, Any]:
    if output == "json":
        return cast("dict[str, Any]", json.loads(text)["scheduledJob"])
    return cast("dict[str, Any]", yaml.safe_load(text.partition("\n---\n")[0]))


@pytest.mark.parametrize("output", ["table", "json"])
def test_a_dry_run_manifest_applied_later_runs_no_slot_from_before_it(output: str) -> None:
    """Saved at 12:00:30 and applied an hour later, while the CronJob ran on: the operator's
    first decision on it must run no slot from before its creation (the CronJob ran them)."""
    api = FakeApi()
    api.cronjobs["nightly"] = a_cronjob()
    ctx, out = make_context(api, output)
    adopt.cmd_adopt(ctx, "cronjob/nightly", dry_run=True, zone="UTC")
    manifest = _dry_run_manifest(out.getvalue(), output)

    applied = NOW + HOUR  # 13:00:30; the CronJob ran 13:00 itself
    live = copy.deepcopy(manifest)
    live["metadata"].update(uid="sj-uid", creationTimestamp=format_time(applied))
    decision = decide(ScheduledJobView.from_object(live), [], applied + timedelta(seconds=1))

    assert [run.slot for run in decision.runs] == []
    assert decision.status["processedUntil"] == format_time(applied)


@pytest.mark.parametrize("skew", [-HOUR, HOUR], ids=["host-behind", "host-ahead"])
def test_adopt_reads_the_api_server_s_clock_not_the_host_s(skew: timedelta) -> None:
    """The CronJob's Jobs are gone (a TTL): its status alone says where it stopped (11:59). A
    host clock off by an hour either way changes neither the start point nor what is listed."""
    api = FakeApi()
    api.cronjobs["nightly"] = a_cronjob()
    ctx, dry = make_context(api, host_clock=NOW + skew)
    adopt.cmd_adopt(ctx, "cronjob/nightly", dry_run=True, zone="UTC")
    ctx, adopted = make_context(api, host_clock=NOW + skew)
    adopt.cmd_adopt(ctx, "cronjob/nightly", dry_run=False, zone="UTC")

    # By the server's clock (12:00:30), the CronJob missed 12:00 alone.
    missed = (
        "# - missed slots: 1 since lastScheduleTime 2026-12-01T11:59:00Z, "
        "the latest 2026-12-01T12:00:00Z"
    )
    assert missed in dry.getvalue()
    assert missed in adopted.getvalue()
    created = api.writes[1][2]
    assert created["metadata"]["annotations"]["cronlease.io/start-after"] == "2026-12-01T11:59:00Z"
    assert "its cursor at 2026-12-01T11:59:00Z" in cast("io.StringIO", ctx.err).getvalue()
    assert "slots after 2026-12-01T11:59:00Z are cronlease's" in adopted.getvalue()


@pytest.mark.parametrize("output", ["table", "json"])
def test_the_real_adopt_lists_the_differences_as_the_dry_run_does(output: str) -> None:
    api = FakeApi()
    api.cronjobs["nightly"] = a_cronjob(concurrencyPolicy="Forbid")
    ctx, dry = make_context(api, output)
    adopt.cmd_adopt(ctx, "cronjob/nightly", dry_run=True, zone="UTC")
    ctx, real = make_context(api, output)
    adopt.cmd_adopt(ctx, "cronjob/nightly", dry_run=False, zone="UTC")

    if output == "json":
        expected = json.loads(dry.getvalue())["differences"]
        assert json.loads(real.getvalue())["differences"] == expected
        assert json.loads(real.getvalue())["scheduledJob"]["metadata"]["uid"] == "sj-uid"
        return
    listed = dry.getvalue().partition("# What differs from the CronJob")[2]
    assert listed.count("\n# - ") >= 5  # time zone, Forbid racing, missed slots, names, ...
    assert listed in real.getvalue()  # the same list, and not "suspended" (adopt's own doing)


@pytest.mark.parametrize(("admitted", "expected"), [(True, None), (False, "refused")])
def test_run_now_prints_the_job_or_says_it_was_refused(
    admitted: bool, expected: str | None
) -> None:
    api = FakeApi()
    api.sjs["report"] = {"metadata": {"name": "report"}, "status": {}}
    api.admits_run_now = admitted
    ctx, out = make_context(api)
    if expected:
        with pytest.raises(PluginError, match=expected):
            commands.cmd_run_now(ctx, "report")
    else:
        assert commands.cmd_run_now(ctx, "report") == 0
        assert out.getvalue().startswith("job.batch/report-m")
