"""The bench tools' one percentile (hack/percentiles.py): the nearest rank."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from percentiles import nearest_rank


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([3.0, 1.0, 2.0], 0.5, 2.0),  # unsorted in, the middle out
        ([9.0, 12.0], 0.5, 9.0),  # an even count: the lower of the two, never their mean
        ([1.0, 2.0, 3.0, 4.0], 0.5, 2.0),  # rounding q * (n - 1) would give 3.0
        ([1.0, 2.0, 3.0, 4.0], 0.75, 3.0),
        ([float(i) for i in range(1, 101)], 0.99, 99.0),
        ([float(i) for i in range(1, 51)], 0.99, 50.0),  # under 100 values: the largest
        ([5.0, 7.0], 0.0, 5.0),
        ([5.0, 7.0], 1.0, 7.0),
    ],
)
def test_the_nearest_rank(values: list[float], q: float, expected: float) -> None:
    assert nearest_rank(values, q) == expected


def test_no_values_have_no_percentile() -> None:
    with pytest.raises(ValueError, match="no values"):
        nearest_rank([], 0.5)


@given(
    st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1),
    st.floats(min_value=0.0, max_value=1.0),
)
def test_at_least_the_share_q_are_at_or_below_it_and_fewer_below(
    values: list[float], q: float
) -> None:
    value = nearest_rank(values, q)
    assert value in values
    assert sum(v <= value for v in values) >= q * len(values)
    assert sum(v < value for v in values) < max(q * len(values), 1)
