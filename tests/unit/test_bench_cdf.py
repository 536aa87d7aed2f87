"""The bench's lag CDF (bench/bench.py) counts every Job due: missing Jobs keep a controller's
curve below 1 (issue 19, item 3)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench.py"


def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_under_test", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_a_controller_that_missed_half_its_jobs_reaches_only_half() -> None:
    module = bench()
    half = module.Phase("cronjob", 4, lags=[0.5, 1.0], missing=2)
    lags, due = module.cdf(half)
    assert (lags, due) == ([0.5, 1.0], 4)
    assert [(i + 1) / due for i in range(len(lags))][-1] == 0.5
    whole = module.Phase("cronlease", 4, lags=[0.4, 0.3, 0.2, 0.1])
    assert module.cdf(whole) == ([0.1, 0.2, 0.3, 0.4], 4)
