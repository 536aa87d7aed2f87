"""`kubectl cronlease` (issue 18) against the real control plane: every command, run as users run
it, from the plugin's own environment (`make plugin` builds .venv-plugin; the operator's venv
never holds the `kubernetes` client). The migration test adopts a CronJob running every minute
and checks, with the ledger and with its own count of Jobs by slot, one run per slot across the
handover."""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.cluster import kwok_pod_template
from devcluster.replica import OPERATOR_NAMESPACE, OperatorProcess
from kube import Kube, jobs_of, scheduledjob, status_of, wait_for, wait_until

REPO = Path(__file__).resolve().parents[2]
PLUGIN_BIN = REPO / ".venv-plugin" / "bin"
PLUGIN = PLUGIN_BIN / "kubectl-cronlease"
DAILY = "0 0 * * *"
NEVER_SOON = "0 0 1 1 *"  # once a year: nothing of the schedule's own runs within a test


def stamp(instant: datetime) -> str:
    return instant.strftime("%Y-%m-%dT%H:%M:%SZ")


class Plugin:
    """`kubectl-cronlease` with the test cluster's kubeconfig, as a separate process."""

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig

    def run(
        self, *args: str, check: bool = True, timeout: float = 150
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(PLUGIN), *args, "--kubeconfig", str(self.kubeconfig)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "NO_COLOR": "1"},
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl cronlease {' '.join(args)}: {result.stderr.strip()}")
        assert "Traceback" not in result.stderr, result.stderr
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "-o", "json").stdout)


@pytest.fixture(scope="session")
def plugin(kube: Kube) -> Plugin:
    assert PLUGIN.exists(), f"{PLUGIN} is missing: `make plugin` builds the plugin's venv"
    return Plugin(kube.kubeconfig)


def show(title: str, text: str) -> None:
    """Printed for the record (pytest -s shows it; the issue's closing note quotes it)."""
    print(f"\n--- {title} ---\n{text}")


def test_kubectl_finds_the_plugin_and_next_lints_without_a_cluster(kube: Kube) -> None:
    env = {**os.environ, "PATH": f"{PLUGIN_BIN}:{os.environ['PATH']}", "KUBECONFIG": "/nowhere"}
    found = subprocess.run(
        [
            kube.binary,
            "cronlease",
            "next",
            "--schedule",
            "30 2 * * *",
            "--tz",
            "Europe/Berlin",
            "-c",
            "2",
            "--from",
            "2026-03-28T00:00:00Z",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )
    assert found.returncode == 0, found.stderr
    lines = found.stdout.splitlines()
    assert lines[0] == "schedule: 30 2 * * *   timeZone: Europe/Berlin"
    assert "2026-03-29T01:00:00Z" in lines[-1]
    assert "spring-forward" in lines[-1]
    bad = subprocess.run(
        [kube.binary, "cronlease", "next", "--schedule", "0 0 30 2 *"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )
    assert bad.returncode == 1
    assert bad.stderr.strip().splitlines() == [
        'error: invalid: schedule: "0 0 30 2 *" never fires (no matching date within 5 years)'
    ]


def test_impersonation_is_what_the_api_server_authorises(
    kube: Kube, namespace: str, crd: str, plugin: Plugin
) -> None:
    # The test's kubeconfig may impersonate; the identity it acts as may read nothing.
    result = plugin.run(
        "history", "x", "-n", namespace, "--as", "nobody", "--as-group", "no-group", check=False
    )
    assert result.returncode == 1
    assert 'User "nobody" cannot get resource "scheduledjobs"' in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1


def test_bad_names_and_unknown_objects_are_one_line(
    kube: Kube, namespace: str, crd: str, plugin: Plugin
) -> None:
    for args, message in [
        (
            ("history", "nosuch", "-n", namespace),
            f"error: scheduledjob 'nosuch' in namespace '{namespace}' not found",
        ),
        (
            ("audit", "nosuch", "-n", namespace),
            f"error: scheduledjob 'nosuch' in namespace '{namespace}' not found",
        ),
        (
            ("adopt", "cronjob/nosuch", "-n", namespace, "--dry-run"),
            f"error: cronjob 'nosuch' in namespace '{namespace}' not found",
        ),
        (("run-now", "Not_A_Name", "-n", namespace), "error: invalid name 'Not_A_Name'"),
        (("history", "x", "-n", "Bad NS"), "error: invalid namespace 'Bad NS'"),
        (
            ("backfill", "x", "-n", namespace, "--from", "2h", "--to", "3h"),
            "error: --to (3h) is before --from (2h)",
        ),
    ]:
        result = plugin.run(*args, check=False)
        assert result.returncode == 1, (args, result.stderr)
        assert result.stderr.startswith(message), result.stderr
        assert result.stderr.count("\n") == 1


def test_run_now_history_next_suspend_resume_and_replay(
    kube: Kube, namespace: str, operator: OperatorProcess, plugin: Plugin
) -> None:
    kube.apply(scheduledjob("report", namespace, schedule=NEVER_SOON, timeZone="Europe/Berlin"))
    kube.apply(
        {
            **scheduledjob("other", namespace, schedule=NEVER_SOON),
            "metadata": {"name": "other", "namespace": namespace, "labels": {"team": "a"}},
        }
    )
    wait_for(lambda: status_of(kube, namespace, "report").get("observedSchedule"), 20, "a decision")

    created = plugin.run("run-now", "report", "-n", namespace).stdout.strip()
    assert created.startswith("job.batch/report-m")
    assert "created (run-now" in created
    job_name = created.split()[0].removeprefix("job.batch/")
    job = kube.get("job", job_name, namespace)
    assert job is not None
    assert job["metadata"]["labels"]["cronlease.io/trigger"] == "Manual"

    wait_for(
        lambda: any(
            r["result"] == "Succeeded" for r in plugin.json("history", "report", "-n", namespace)
        ),
        30,
        "the run-now's run to succeed",
    )
    table = plugin.run("history", "report", "-n", namespace).stdout
    show("kubectl cronlease history report", table)
    header, row = table.splitlines()[0], table.splitlines()[1]
    assert header.split() == [
        "RUN",
        "SLOT",
        "TRIGGER",
        "ATTEMPTS",
        "RESULT",
        "LAG",
        "FINISHED",
        "JOB",
    ]
    assert row.split()[:5] == [job_name, row.split()[1], "Manual", "1", "Succeeded"]
    # kubectl's -o name (to pipe into kubectl) and -o wide (more columns) on a real Job.
    named = plugin.run("history", "report", "-n", namespace, "-o", "name").stdout
    assert named.splitlines() == [f"job.batch/{job_name}"]
    assert kube.get("job", named.strip().split("/")[1], namespace) is not None
    wide = plugin.run("history", "report", "-n", namespace, "-o", "wide").stdout
    assert wide.splitlines()[0].split()[-3:] == ["STARTED", "REASON", "KIND"]
    assert wide.splitlines()[1].split()[-1] == "Job"

    upcoming = plugin.json("next", "report", "-n", namespace, "-c", "2")
    assert upcoming["timeZone"] == "Europe/Berlin"
    assert [entry["local"][5:16] for entry in upcoming["next"]] == ["01-01T00:00"] * 2
    assert upcoming["dstRule"].startswith("each wall-clock time fires once")

    out = plugin.run("suspend", "-l", "team=a", "-n", namespace).stdout.strip()
    assert out == "scheduledjob.cronlease.io/other suspended"
    assert kube.get("scheduledjob", "other", namespace)["spec"]["suspend"] is True
    assert kube.get("scheduledjob", "report", namespace)["spec"].get("suspend") is not True
    plugin.run("suspend", "report", "-n", namespace)
    assert kube.get("scheduledjob", "report", namespace)["spec"]["suspend"] is True
    out = plugin.run("resume", "report", "-n", namespace, "-o", "name").stdout.strip()
    assert out == "scheduledjob.cronlease.io/report"
    assert kube.get("scheduledjob", "report", namespace)["spec"]["suspend"] is False

    # Replay of a run by its Job's name: a RunRequest, followed to its end.
    result = plugin.run("replay", job_name, "-n", namespace)
    assert "Complete: 1 target(s), 1 succeeded, 0 failed" in result.stdout
    assert "runrequest.cronlease.io/report-replay-" in result.stderr
    replays = kube.items("jobs", namespace, "cronlease.io/trigger=Replay")
    assert len(replays) == 1


def test_backfill_dead_letters_and_replaying_them(
    kube: Kube, namespace: str, operator: OperatorProcess, plugin: Plugin
) -> None:
    kube.apply(scheduledjob("daily", namespace, schedule=DAILY, successfulJobsHistoryLimit=10))
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    start = today - timedelta(days=2)
    result = plugin.run(
        "backfill", "daily", "-n", namespace, "--from", stamp(start), "--to", stamp(today)
    )
    assert "Complete: 3 target(s), 3 succeeded, 0 failed" in result.stdout
    backfills = kube.items("jobs", namespace, "cronlease.io/trigger=Backfill")
    assert sorted(j["metadata"]["annotations"]["cronlease.io/scheduled-at"] for j in backfills) == [
        stamp(start + timedelta(days=d)) for d in range(3)
    ]
    future = plugin.run(
        "backfill",
        "daily",
        "-n",
        namespace,
        "--from",
        "now",
        "--to",
        stamp(datetime.now(UTC) + timedelta(days=1)),
        check=False,
    )
    assert future.returncode == 1
    assert "is in the future" in future.stderr

    retry = {"maxAttempts": 1}
    now = stamp(datetime.now(UTC))
    kube.apply(scheduledjob("close", namespace, result="Failed", runAt=now, retry=retry))
    letters = wait_for(lambda: plugin.json("dead-letters", "-n", namespace), 40, "a dead letter")
    assert [(d["scheduled_job"], d["attempts"]) for d in letters] == [("close", 1)]
    every = plugin.run("dead-letters", "-A").stdout
    show("kubectl cronlease dead-letters -A", every)
    assert any(line.split()[:2] == [namespace, "close"] for line in every.splitlines()[1:])
    # Fixed, then every dead letter replayed.
    kube.apply(scheduledjob("close", namespace, runAt=now, retry=retry))
    result = plugin.run("replay", "--dead-letters", "close", "-n", namespace)
    assert "Complete: 1 target(s), 1 succeeded, 0 failed" in result.stdout
    wait_for(lambda: plugin.json("dead-letters", "-n", namespace) == [], 20, "no dead letter")


def test_audit_of_a_per_two_seconds_schedule_and_the_leader(
    kube: Kube, namespace: str, operator: OperatorProcess, plugin: Plugin
) -> None:
    kube.apply(
        scheduledjob("tick", namespace, schedule="*/2 * * * * *", successfulJobsHistoryLimit=50)
    )
    created = datetime.fromisoformat(
        kube.get("scheduledjob", "tick", namespace)["metadata"]["creationTimestamp"].replace(
            "Z", "+00:00"
        )
    )
    wait_for(lambda: len(jobs_of(kube, namespace, "tick")) >= 4, 30, "four runs")
    # Suspended while a few slots go by: recorded as skipped (Suspended) at the resume.
    plugin.run("suspend", "tick", "-n", namespace)
    wait_for(
        lambda: (
            (s := kube.get("scheduledjob", "tick", namespace))["status"].get("observedGeneration")
            == s["metadata"]["generation"]
        ),
        10,
        "the suspension seen",
    )
    wait_until(datetime.now(UTC) + timedelta(seconds=5))  # slots must pass while suspended
    plugin.run("resume", "tick", "-n", namespace)
    wait_for(
        lambda: status_of(kube, namespace, "tick").get("slotsSkipped", {}).get("Suspended"),
        10,
        "the suspended slots recorded",
    )
    runs = len(jobs_of(kube, namespace, "tick"))
    wait_for(lambda: len(jobs_of(kube, namespace, "tick")) >= runs + 2, 10, "runs again")
    until = datetime.now(UTC) - timedelta(seconds=1)
    result = plugin.run(
        "audit", "tick", "-n", namespace, "--from", stamp(created), "--to", stamp(until)
    )
    show("kubectl cronlease audit tick", result.stdout)
    lines = result.stdout.splitlines()
    assert lines[1].split() == ["SLOT", "VERDICT", "DETAIL"]
    assert result.stdout.count(" ran ") >= 5
    assert " skipped " in result.stdout
    assert "missing" not in result.stdout
    assert "doubled" not in result.stdout
    data = plugin.json(
        "audit", "tick", "-n", namespace, "--from", stamp(created), "--to", stamp(until)
    )
    assert data["ok"] is True
    verdicts = Counter(slot["verdict"] for slot in data["slots"])
    assert set(verdicts) <= {"ran", "skipped", "before start", "due"}
    skipped = [slot["detail"] for slot in data["slots"] if slot["verdict"] == "skipped"]
    counted = status_of(kube, namespace, "tick")["slotsSkipped"]
    assert skipped == ["Suspended"] * counted["Suspended"]
    assert counted == {"Suspended": counted["Suspended"]}
    ran = {slot["slot"] for slot in data["slots"] if slot["verdict"] == "ran"}
    jobs = {
        j["metadata"]["annotations"]["cronlease.io/scheduled-at"]
        for j in jobs_of(kube, namespace, "tick")
    }
    assert ran <= jobs
    everyone = plugin.run(
        "audit", "-A", "--from", stamp(created), "--to", stamp(until), check=False
    )
    assert any(
        line.split()[:2] == [namespace, "tick"] and line.split()[-1] == "ok"
        for line in everyone.stdout.splitlines()
    )

    shown = plugin.run("leader", "--lease-namespace", OPERATOR_NAMESPACE).stdout
    show("kubectl cronlease leader", shown)
    lease = kube.get("lease", "cronlease-leader", OPERATOR_NAMESPACE)["spec"]
    assert f"Holder:   {lease['holderIdentity']}" in shown
    assert f"Token:    {lease['leaseTransitions']}" in shown
    data = plugin.json("leader", "--lease-namespace", OPERATOR_NAMESPACE)
    holder = [r for r in data["replicas"] if r["holds_lease"]]
    assert [r["identity"] for r in holder] == [lease["holderIdentity"]]
    assert holder[0]["jobs"] >= 5  # it wrote tick's Jobs


def cronjob(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedule": "* * * * *",
            "successfulJobsHistoryLimit": 20,
            "jobTemplate": {"spec": {"backoffLimit": 0, "template": kwok_pod_template()}},
        },
    }


def cronjob_job(
    name: str, namespace: str, uid: str, minutes: int, prefix: str | None = None
) -> dict[str, Any]:
    """A Job as the CronJob's controller makes it for the slot `minutes` (since the epoch)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"{prefix or name}-{minutes}",
            "namespace": namespace,
            "annotations": {
                "batch.kubernetes.io/cronjob-scheduled-timestamp": stamp(
                    datetime.fromtimestamp(minutes * 60, UTC)
                )
            },
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "CronJob",
                    "name": name,
                    "uid": uid,
                    "controller": True,
                }
            ],
        },
        "spec": {"backoffLimit": 0, "template": kwok_pod_template()},
    }


def slot_of(job: dict[str, Any]) -> int:
    """The slot in minutes since the epoch, from the name CronJob and cronlease both give it."""
    return int(job["metadata"]["name"].rsplit("-", 1)[1])


def test_adopting_a_cronjob_mid_schedule_runs_each_slot_once(
    kube: Kube, namespace: str, operator: OperatorProcess, plugin: Plugin
) -> None:
    kube.apply(cronjob("every-minute", namespace))
    # Mid-schedule: the CronJob has run a slot of its own.
    wait_for(lambda: kube.items("jobs", namespace), 75, "the CronJob's first Job", 1)
    dry = plugin.run("adopt", "cronjob/every-minute", "-n", namespace, "--dry-run").stdout
    show("kubectl cronlease adopt cronjob/every-minute --dry-run", dry)
    manifest_text, _, notes = dry.partition("\n---\n")
    manifest = yaml.safe_load(manifest_text)
    assert (manifest["kind"], manifest["metadata"]["name"]) == ("ScheduledJob", "every-minute")
    assert manifest["spec"]["schedule"] == "* * * * *"
    assert manifest["spec"]["timeZone"] == "UTC"
    assert "# - time zone: spec.timeZone is unset" in notes
    assert kube.get("scheduledjob", "every-minute", namespace) is None  # a dry run writes nothing

    adopted = plugin.run("adopt", "cronjob/every-minute", "-n", namespace)
    assert "took over from cronjob.batch/every-minute" in adopted.stdout
    assert kube.get("cronjob", "every-minute", namespace)["spec"]["suspend"] is True
    sj = kube.get("scheduledjob", "every-minute", namespace)
    annotations = sj["metadata"]["annotations"]
    assert "cronlease.io/start-after" not in annotations  # read once by the operator, then gone
    assert annotations["cronlease.io/adopted-from"] == "cronjob/every-minute"
    assert max(slot_of(j) for j in kube.items("jobs", namespace)) * 60 == int(
        datetime.fromisoformat(
            annotations["cronlease.io/adopted-after"].replace("Z", "+00:00")
        ).timestamp()
    )  # the slot the CronJob ran last
    assert sj["spec"].get("suspend") is not True  # suspended by adopt, not by its owner
    # The CronJob's controller creating the next slot's Job late, after adopt read its last slot
    # (a sync slower than the settle time): the same name as cronlease's run of that slot.
    cron = kube.get("cronjob", "every-minute", namespace)
    late = max(slot_of(j) for j in kube.items("jobs", namespace)) + 1
    assert datetime.now(UTC) < datetime.fromtimestamp(late * 60 - 5, UTC), "too near the slot"
    kube.create(cronjob_job("every-minute", namespace, cron["metadata"]["uid"], late))
    # Two slots of cronlease's own after the handover.
    wait_for(
        lambda: len(jobs_of(kube, namespace, "every-minute")) >= 2, 200, "two runs by cronlease", 1
    )
    # cronlease met the CronJob's Job under the slot's name: recorded, not run again.
    assert status_of(kube, namespace, "every-minute")["slotsSkipped"] == {"NameConflict": 1}

    jobs = kube.items("jobs", namespace)
    by_cronjob = [j for j in jobs if j["metadata"]["ownerReferences"][0]["kind"] == "CronJob"]
    by_cronlease = [
        j for j in jobs if j["metadata"]["ownerReferences"][0]["kind"] == "ScheduledJob"
    ]
    assert by_cronjob
    assert len(by_cronlease) >= 2
    # The independent count: one Job per slot, none lost, from the first slot to the last.
    slots = Counter(slot_of(j) for j in jobs)
    assert max(slots.values()) == 1, slots
    assert sorted(slots) == list(range(min(slots), max(slots) + 1))
    assert max(slot_of(j) for j in by_cronjob) < min(slot_of(j) for j in by_cronlease)

    first = datetime.fromtimestamp(min(slots) * 60, UTC)
    last = datetime.fromtimestamp(max(slots) * 60, UTC)
    audit = plugin.run(
        "audit", "every-minute", "-n", namespace, "--from", stamp(first), "--to", stamp(last)
    )
    show("kubectl cronlease audit every-minute (across the handover)", audit.stdout)
    data = plugin.json(
        "audit", "every-minute", "-n", namespace, "--from", stamp(first), "--to", stamp(last)
    )
    assert data["ok"] is True
    assert [s["verdict"] for s in data["slots"]] == ["ran"] * len(slots)
    owners = [s["detail"].endswith("(cronjob/every-minute) Succeeded") for s in data["slots"]]
    assert owners == [True] * len(by_cronjob) + [False] * len(by_cronlease)

    # A second run of a slot cronlease ran (a CronJob's Job under another name): the audit says
    # doubled and exits 3 (a finding, not an error).
    twice = max(slot_of(j) for j in by_cronlease)
    kube.create(
        cronjob_job("every-minute", namespace, cron["metadata"]["uid"], twice, "every-minute-extra")
    )
    doubled = plugin.run(
        "audit",
        "every-minute",
        "-n",
        namespace,
        "--from",
        stamp(first),
        "--to",
        stamp(last),
        check=False,
    )
    show("kubectl cronlease audit every-minute (a second run planted)", doubled.stdout)
    assert doubled.returncode == 3
    assert f"every-minute-extra-{twice} (cronjob/every-minute)" in doubled.stdout
    assert "1 doubled" in doubled.stdout.splitlines()[-1]


def test_a_slot_the_cronjob_skipped_before_the_handover_runs_under_cronlease(
    kube: Kube, namespace: str, operator: OperatorProcess, plugin: Plugin
) -> None:
    """Forbid, and a run longer than a minute: the CronJob skips the next slot (JobAlreadyActive,
    its lastScheduleTime stays). adopt waits for that run to end, then hands over with the
    cursor at the CronJob's last slot: the skipped slot runs once, under cronlease, late (no
    deadline), and no slot has two Jobs."""
    manifest = cronjob("forbid", namespace)
    manifest["spec"]["concurrencyPolicy"] = "Forbid"
    manifest["spec"]["jobTemplate"]["spec"]["template"] = kwok_pod_template("70s")
    kube.apply(manifest)
    (first,) = wait_for(lambda: kube.items("jobs", namespace), 75, "the CronJob's first Job", 1)
    skipped = slot_of(first) + 1
    # The next slot comes while that run goes on: CronJob's Forbid leaves it.
    wait_until(datetime.fromtimestamp(skipped * 60 + 3, UTC))
    assert len(kube.items("jobs", namespace)) == 1
    dry = plugin.run("adopt", "cronjob/forbid", "-n", namespace, "--dry-run").stdout
    assert "# - Forbid racing:" in dry
    adopted = plugin.run("adopt", "cronjob/forbid", "-n", namespace)
    assert "waiting" not in adopted.stderr  # progress lines are drawn on a terminal only
    # adopt waited for the CronJob's run to end before the ScheduledJob existed.
    sj = kube.get("scheduledjob", "forbid", namespace)
    ended = first_completion(kube, namespace, first["metadata"]["name"])
    assert datetime.fromisoformat(
        sj["metadata"]["creationTimestamp"].replace("Z", "+00:00")
    ) >= ended.replace(microsecond=0)
    (late,) = wait_for(
        lambda: jobs_of(kube, namespace, "forbid"), 30, "the skipped slot run by cronlease", 1
    )
    assert slot_of(late) == skipped
    slots = Counter(slot_of(j) for j in kube.items("jobs", namespace))
    assert slots == {skipped - 1: 1, skipped: 1}
    low = datetime.fromtimestamp((skipped - 1) * 60, UTC)
    audit = plugin.json(
        "audit", "forbid", "-n", namespace, "--from", stamp(low), "--to", stamp(low + MINUTE)
    )
    assert audit["ok"] is True
    assert [(s["verdict"], s["jobs"]) for s in audit["slots"]] == [
        ("ran", [first["metadata"]["name"]]),
        ("ran", [late["metadata"]["name"]]),
    ]


MINUTE = timedelta(minutes=1)


def first_completion(kube: Kube, namespace: str, name: str) -> datetime:
    job = kube.get("job", name, namespace)
    assert job is not None
    text = job["status"]["completionTime"]
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
