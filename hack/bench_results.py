"""Where a bench tool leaves its results: NAME.md for people and NAME.json for the raw data,
each replacing the previous run's (git keeps the history)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def save_results(out: Path, name: str, text: str, record: Any) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.md").write_text(text)
    (out / f"{name}.json").write_text(json.dumps(record, indent=2) + "\n")
