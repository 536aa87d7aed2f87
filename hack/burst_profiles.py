"""CPU profiles of both sides of a burst (issue 19, item 1): kube-apiserver's, from its
/debug/pprof (served with --profiling, its default), and the operator's, sampled by py-spy
from outside the process. Each is reduced to a table of the functions with the most time in
them, callees included ("cumulative"), which is what shows whose work a burst is made of."""

from __future__ import annotations

import asyncio
import shutil
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

# A profile covers this many seconds from its start unless told otherwise: at N=1000 a burst
# lasts 2-4 s here, and a longer window mixes in the status writes that follow it.
DEFAULT_SECONDS = 5
TOP_ROWS = 40


async def _run(*argv: str) -> bytes:
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
    )
    out, _ = await process.communicate()
    return out


async def profile_apiserver(out: Path, name: str, seconds: int) -> None:
    """kube-apiserver's CPU over the next `seconds`, through kubectl as the admin (KUBECONFIG);
    `go tool pprof -top -cum` writes its table next to it."""
    query = f"/debug/pprof/profile?seconds={seconds}"
    profile = await _run("kubectl", "get", "--raw", query)
    await asyncio.to_thread(out.mkdir, parents=True, exist_ok=True)
    path = out / f"{name}.apiserver.pprof"
    await asyncio.to_thread(path.write_bytes, profile)
    top = await _run("go", "tool", "pprof", "-top", "-cum", f"-nodecount={TOP_ROWS}", str(path))
    await asyncio.to_thread((out / f"{name}.apiserver.top.txt").write_bytes, top)


async def profile_operator(out: Path, name: str, seconds: int, pid: int) -> None:
    """The operator's Python stacks over the same window, if py-spy is installed (the dev
    group has it, the image not). --nonblocking: the operator is never paused to be read."""
    spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if spy is None:
        return
    await asyncio.to_thread(out.mkdir, parents=True, exist_ok=True)
    raw = out / f"{name}.operator.txt"
    await _run(
        spy, "record", "--pid", str(pid), "--duration", str(seconds), "--rate", "200",
        "--nonblocking", "--format", "raw", "--output", str(raw),
    )  # fmt: skip
    if raw.exists():
        table = cumulative_table(await asyncio.to_thread(raw.read_text))
        await asyncio.to_thread((out / f"{name}.operator.top.txt").write_text, table)


def cumulative_table(collapsed: str, rows: int = TOP_ROWS) -> str:
    """From py-spy's raw output (one "frame;frame;... count" line per distinct stack, the
    outermost frame first), each function's share of the samples with it anywhere on the stack,
    counted once per sample however deep it recurses, and its share at the top (self)."""
    total = 0
    cumulative: Counter[str] = Counter()
    own: Counter[str] = Counter()
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_function(frame) for frame in stack.split(";")]
        total += count
        for function in set(frames):
            cumulative[function] += count
        own[frames[-1]] += count
    if total == 0:
        return "no samples\n"
    lines = [f"{total} samples", "   cum%   self%  function"]
    for function, count in cumulative.most_common(rows):
        lines.append(f"{100 * count / total:6.1f}  {100 * own[function] / total:6.1f}  {function}")
    return "\n".join(lines) + "\n"


def _function(frame: str) -> str:
    """A frame, "name (path/to/module.py:123)", as its function: "name (module.py)"."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rpartition(":")[0] or where.rstrip(")")
    return f"{name} ({Path(path).name})"


@dataclass(frozen=True)
class Profiler:
    """Where and how long to profile, and the operator's process."""

    out: Path
    seconds: int
    operator_pid: int

    async def take(self, name: str, operator: bool = True) -> None:
        """Both profiles over the same window from now (the operator's only while it works)."""
        sides = [profile_apiserver(self.out, name, self.seconds)]
        if operator:
            sides.append(profile_operator(self.out, name, self.seconds, self.operator_pid))
        await asyncio.gather(*sides)
