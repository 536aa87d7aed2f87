"""The burst model of docs/scaling.md (hack/shard_model.py): each limit where it should be."""

from __future__ import annotations

import pytest

from shard_model import Leader, Slot, largest_burst, shard_of, simulate


def burst(n: int, per_namespace: int = 1, decide: float = 0.0) -> list[Slot]:
    return [Slot(f"ns-{i // per_namespace:05d}", decide) for i in range(n)]


def test_a_slow_api_server_sets_the_pace() -> None:
    lags = sorted(simulate(burst(100), 1, Leader(overhead=0.0), rate=100.0))
    assert lags == pytest.approx([(i + 1) / 100 for i in range(100)])


def test_a_slow_leader_sets_the_pace_and_shards_share_it() -> None:
    leader = Leader(overhead=0.002)
    one = simulate(burst(500), 1, leader, rate=1e9)
    assert max(one) == pytest.approx(500 * 0.002)
    # Two shards: the busier one's share of the slots, at the same cost each.
    busiest = max(sum(1 for i in range(500) if shard_of(f"ns-{i:05d}", 2) == k) for k in (0, 1))
    two = simulate(burst(500), 2, leader, rate=1e9)
    assert max(two) == pytest.approx(busiest * 0.002)
    assert busiest < 500


def test_the_pure_core_adds_its_time_per_slot() -> None:
    lags = simulate(burst(10, decide=0.001), 1, Leader(overhead=0.002), rate=1e9)
    assert max(lags) == pytest.approx(10 * 0.003)


def test_a_leader_waits_for_a_free_create_slot() -> None:
    # One create outstanding at a time: each waits for the one before to complete.
    lags = sorted(simulate(burst(5), 1, Leader(overhead=0.01, in_flight=1), rate=10.0))
    assert lags == pytest.approx([0.11 * (i + 1) for i in range(5)])


def test_a_namespace_stays_in_one_shard() -> None:
    assert len({shard_of("team-a", 8) for _ in range(3)}) == 1
    assert {shard_of(f"ns-{i}", 4) for i in range(100)} == {0, 1, 2, 3}


def test_the_largest_burst_within_a_second() -> None:
    # API-bound at 128 Jobs/s (exact in binary): the p99 of N is rank ceil(0.99 N), at that
    # rank / 128 s, so 129 fits (rank 128) and 130 does not (rank 129).
    found = largest_burst(burst, 1, Leader(overhead=0.0), rate=128.0)
    assert found == 129
