"""The one percentile of the bench tools (bench.py, failover.py, shards.py and its model).

The nearest rank: the smallest value that at least the fraction `q` of them are at or below. It
is always one of the values measured, never an interpolation between two runs, and a p99 of
fewer than 100 values is their largest, which is what a target on a p99 has to meet. A median
the issues name as such (failover.py's) is statistics.median, the mean of the middle two of an
even count, as the word is commonly read; a p50 here is the lower of the two.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def nearest_rank(values: Sequence[float], q: float) -> float:
    """The value at quantile `q` (0 to 1) of `values`: the nearest rank. Raises ValueError
    when there are none: no value is not a measurement of zero."""
    if not values:
        raise ValueError("the percentile of no values")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]
