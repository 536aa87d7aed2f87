"""The chaos auditor's audit of step pods (hack/chaos_pods.py): each flaw it must find."""

from __future__ import annotations

from typing import Any

from chaos_pods import Attempt, PodLife, audit_pods, pod_life

ATTEMPTS = {
    "j1": Attempt("r", "interest", "run", 1),
    "j2": Attempt("r", "interest", "run", 2),
    "c1": Attempt("r", "snapshot", "compensate", 1),
    "s1": Attempt("r", "snapshot", "run", 1),
}


def pod(job_uid: str, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {"labels": {"batch.kubernetes.io/controller-uid": job_uid}},
        "status": {"phase": phase},
    }


def life(job_uid: str, began: float, ended: float | None) -> PodLife:
    return PodLife(job_uid, began, ended)


def test_a_pod_lives_from_its_sighting_until_it_ends_or_goes() -> None:
    found = pod_life(pod("j1"), 10.0)
    assert found is not None
    found.observe(pod("j1"), 12.0)
    assert found.ended is None
    found.observe(pod("j1", "Succeeded"), 15.0)
    found.observe(pod("j1"), 20.0, deleted=True)
    assert (found.began, found.ended) == (10.0, 15.0)
    assert pod_life({"metadata": {"labels": {}}}, 1.0) is None  # not a Job's


def test_two_attempts_of_a_step_alive_at_once_are_found() -> None:
    apart = audit_pods([life("j1", 0, 10), life("j2", 10.5, None)], ATTEMPTS, {})
    assert apart["step_pods_of_two_attempts_at_once"] == 0  # within the watch's slack
    together = audit_pods([life("j1", 0, 10), life("j2", 5, None)], ATTEMPTS, {})
    assert together["step_pods_of_two_attempts_at_once"] == 1


def test_a_compensation_beside_a_step_pod_is_found() -> None:
    beside = audit_pods([life("j1", 0, 10), life("c1", 5, 8)], ATTEMPTS, {})
    assert beside["compensation_beside_a_step_pod"] == 1
    after = audit_pods([life("s1", 0, 1), life("j1", 1, 10), life("c1", 11, 12)], ATTEMPTS, {})
    assert after["compensation_beside_a_step_pod"] == 0


def test_a_pod_alive_after_its_run_let_go_is_found() -> None:
    assert audit_pods([life("j1", 0, 30)], ATTEMPTS, {"r": 20})["step_pods_outliving_their_run"]
    assert audit_pods([life("j1", 0, None)], ATTEMPTS, {"r": 20})["step_pods_outliving_their_run"]
    fine = audit_pods([life("j1", 0, 20.5)], ATTEMPTS, {"r": 20})
    assert fine["step_pods_outliving_their_run"] == 0
