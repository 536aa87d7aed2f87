"""The wake-up queue with an injected clock: earlier plans win, backoffs are floors."""

from __future__ import annotations

from cronlease.shell.wakeups import WakeupQueue


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def queue() -> tuple[WakeupQueue[str], Clock]:
    clock = Clock()
    return WakeupQueue(clock=clock), clock


def test_an_earlier_plan_wins_and_each_key_pops_once() -> None:
    wakeups, clock = queue()
    wakeups.notify("a", 105)
    wakeups.notify("a", 103)
    wakeups.notify("a", 104)
    wakeups.notify("b", 103)
    clock.now = 103
    assert wakeups.pop_due() == ["a", "b"]
    clock.now = 105
    assert wakeups.pop_due() == []  # the later plans of "a" were superseded


def test_a_backoff_is_a_floor_for_later_notifications() -> None:
    wakeups, clock = queue()
    wakeups.notify("a")  # planned now, then the attempt fails
    wakeups.back_off("a", 10)
    wakeups.notify("a")  # one of its Jobs changed
    clock.now = 109.9
    assert wakeups.pop_due() == []
    clock.now = 110
    assert wakeups.pop_due() == ["a"]
    wakeups.notify("a")  # the retry ran: no floor any more
    assert wakeups.pop_due() == ["a"]


def test_a_change_of_the_object_itself_lifts_the_backoff() -> None:
    wakeups, _ = queue()
    wakeups.back_off("a", 10)
    wakeups.changed("a")
    assert wakeups.pop_due() == ["a"]
