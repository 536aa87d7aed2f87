"""The kubectl plugin as a distribution of its own, `kubectl-cronlease`, from this source tree:
`make plugin-dist` builds its wheel, `make krew` the krew archive and manifest from that wheel.

The operator's distribution (`cronlease`) carries kopf, aiohttp and prometheus-client; the plugin
needs none of them. So the wheel holds exactly the modules the plugin imports: the import closure
of `cronlease.kubectl` computed from the sources (module level and inside functions, as ast reads
them), copied to a staging tree with a pyproject.toml written from the project's own (version,
licence, Python, and the plugin's dependencies: the `plugin` group, croniter and tzdata with the
bounds the operator declares). A second static pyproject (or a setuptools listing by hand) would
be a second copy of the module list and of the version, and would drift the day the plugin
imports one more pure module; the closure cannot.

krew runs no pip: its archive holds one executable, a zipapp of the wheel and its dependencies
(pure Python: the compiled speedups are left out, their modules fall back to Python), run by
the user's `python3` (3.11 or later). Named `kubectl_complete-cronlease` (a link), it completes.

    python hack/plugin_dist.py wheel [--out DIR] [--wheels DIR]
    python hack/plugin_dist.py krew [--out DIR] [--wheels DIR] [--url-base URL]
"""

from __future__ import annotations

import argparse
import ast
import gzip
import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipapp
from collections.abc import Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SOURCES = REPO / "operator"
OUT = REPO / ".cache" / "plugin-dist"
NAME = "kubectl-cronlease"
ENTRIES = ("cronlease.kubectl.cli", "cronlease.kubectl.completion", "cronlease.kubectl.__main__")
# What the plugin's modules may import beyond the standard library (the `plugin` group and the
# schedule arithmetic), by import name; tests/unit/kubectl/test_kubectl_dist.py holds the closure to
# it.
THIRD_PARTY = frozenset({"kubernetes", "urllib3", "yaml", "croniter"})
# The operator's dependencies the plugin also needs: croniter (cronlease.core.schedule.cron) and
# tzdata (zoneinfo on hosts without a time zone database).
SHARED_DEPENDENCIES = ("croniter", "tzdata")
SCRIPTS = {
    "kubectl-cronlease": "cronlease.kubectl.cli:main",
    "kubectl_complete-cronlease": "cronlease.kubectl.completion:main",
}
KREW_API = "krew.googlecontainertools.github.com/v1alpha2"


# --- the modules -------------------------------------------------------------------------------


def _path(module: str) -> Path | None:
    base = SOURCES / module.replace(".", "/")
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def closure(entries: Iterable[str] = ENTRIES) -> dict[str, set[str]]:
    """Every `cronlease` module the entries import, directly or not, with the top-level names
    of what each imports from outside the project (standard library included)."""
    found: dict[str, set[str]] = {}
    todo = list(entries)
    while todo:
        module = todo.pop()
        path = _path(module)
        if module in found or path is None:
            continue
        outside: set[str] = set()
        found[module] = outside
        parts = module.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # the packages above
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            for name in names:
                if name.split(".")[0] == "cronlease":
                    todo += [name] if _path(name) else []
                else:
                    outside.add(name.split(".")[0])
    return found


def third_party(found: dict[str, set[str]]) -> set[str]:
    return {n for names in found.values() for n in names} - set(sys.stdlib_module_names)


# --- the wheel ---------------------------------------------------------------------------------


def project() -> dict[str, Any]:
    with (REPO / "pyproject.toml").open("rb") as file:
        data: dict[str, Any] = tomllib.load(file)["project"]
    return data


def _requirement_name(requirement: str) -> str:
    return requirement.split(";")[0].split("[")[0].split("<")[0].split(">")[0].split("=")[0]


def dependencies(meta: dict[str, Any]) -> list[str]:
    shared = [
        r for r in meta["dependencies"] if _requirement_name(r).strip() in SHARED_DEPENDENCIES
    ]
    return [*meta["optional-dependencies"]["plugin"], *shared]


def pyproject(meta: dict[str, Any], packages: Iterable[str]) -> str:
    """The staged pyproject.toml (TOML's basic strings read JSON's escapes), naming the packages
    the closure reaches (the core's, the plugin's)."""
    q = json.dumps
    lines = [
        "[build-system]",
        'requires = ["setuptools>=77"]',  # the SPDX `license` string
        'build-backend = "setuptools.build_meta"',
        "",
        "[project]",
        f"name = {q(NAME)}",
        f"version = {q(meta['version'])}",
        f"description = {q('kubectl cronlease: the kubectl plugin of the cronlease operator')}",
        'readme = "README.md"',
        f"requires-python = {q(meta['requires-python'])}",
        f"license = {q(meta['license'])}",
        f"dependencies = {q(dependencies(meta))}",
        "",
        "[project.scripts]",
        *(f"{q(script)} = {q(target)}" for script, target in SCRIPTS.items()),
        "",
        "[tool.setuptools]",
        f"packages = {q(sorted(packages))}",
        "",
    ]
    return "\n".join(lines)


README = """\
# kubectl-cronlease

`kubectl cronlease`: run, inspect, audit and migrate the ScheduledJobs of the cronlease
operator. The plugin alone: the official `kubernetes` client, PyYAML, croniter and the pure
modules of cronlease it uses; none of the operator's runtime.

    pipx install kubectl_cronlease-{version}-py3-none-any.whl
    kubectl cronlease --help
"""


def stage(out: Path, meta: dict[str, Any]) -> Path:
    """The staging tree: the closure's modules, pyproject.toml, README.md, LICENSE."""
    src = out / "src"
    shutil.rmtree(src, ignore_errors=True)
    modules = closure()
    for module in sorted(modules):
        path = _path(module)
        assert path is not None
        target = src / path.relative_to(SOURCES)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    packages = {m for m in modules if _path(m) == SOURCES / m.replace(".", "/") / "__init__.py"}
    (src / "pyproject.toml").write_text(pyproject(meta, packages))
    (src / "README.md").write_text(README.format(version=meta["version"]))
    shutil.copyfile(REPO / "LICENSE", src / "LICENSE")
    return src


def build_wheel(out: Path = OUT, wheels: Path | None = None) -> Path:
    """The wheel in `out`, and in `wheels` (default `out`/wheels) every wheel it needs (fetched
    once, then reused) so that installs of it can be offline (`pip install --no-index
    --find-links`). The build itself is offline: setuptools from this environment (the `dev`
    group's), not one pip would fetch into an isolated build environment."""
    meta = project()
    wheels = wheels or out / "wheels"
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("kubectl_cronlease-*.whl"):
        old.unlink()
    src = stage(out, meta)
    pip = [sys.executable, "-m", "pip"]
    # Its build requirements checked (a clear error from an older setuptools, not a bad build).
    build = [*pip, "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
    build.append("--check-build-dependencies")
    subprocess.run([*build, "--wheel-dir", str(out), str(src)], check=True)
    shutil.rmtree(src)
    (wheel,) = out.glob(f"kubectl_cronlease-{meta['version']}-*.whl")
    fetch = [*pip, "download", "--quiet", "--dest", str(wheels), "--find-links", str(wheels)]
    # Offline when the wheels fetched before still satisfy it; the index only when not.
    offline = subprocess.run([*fetch, "--no-index", str(wheel)], capture_output=True, check=False)
    if offline.returncode != 0:
        subprocess.run([*fetch, str(wheel)], check=True)
    (wheels / wheel.name).unlink(missing_ok=True)  # the project's own wheel stays beside them
    return wheel


# --- krew --------------------------------------------------------------------------------------


def build_zipapp(wheel: Path, out: Path, wheels: Path) -> Path:
    """One executable: the wheel and its dependencies, pure Python, with a `python3` shebang."""
    tree = out / "zipapp"
    shutil.rmtree(tree, ignore_errors=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-index",
            "--no-compile",
            "--find-links",
            str(wheels),
            "--target",
            str(tree),
            str(wheel),
        ],
        check=True,
    )
    shutil.rmtree(tree / "bin", ignore_errors=True)
    for compiled in [*tree.rglob("*.so"), *tree.rglob("*.pyd")]:  # a zip cannot load them
        compiled.unlink()
    target = out / NAME
    zipapp.create_archive(
        tree,
        target,
        interpreter="/usr/bin/env python3",
        main="cronlease.kubectl.__main__:main",
        compressed=True,
    )
    shutil.rmtree(tree)
    return target


def build_archive(executable: Path, out: Path, version: str) -> Path:
    """A .tar.gz with the executable and the licence: no times, owners or gzip name, so the
    archive's bytes (and the manifest's sha256) depend on its two files alone."""
    archive = out / f"{NAME}-v{version}.tar.gz"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, mode in ((executable, 0o755), (REPO / "LICENSE", 0o644)):
            info = tarfile.TarInfo(path.name)
            data = path.read_bytes()
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))
    with (
        archive.open("wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz,
    ):
        gz.write(buffer.getvalue())
    return archive


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def manifest(archive: Path, version: str, uri: str) -> dict[str, Any]:
    """krew's Plugin manifest for the archive: every OS with a python3 (the archive is pure
    Python, one for all platforms)."""
    return {
        "apiVersion": KREW_API,
        "kind": "Plugin",
        "metadata": {"name": "cronlease"},
        "spec": {
            "version": f"v{version}",
            "shortDescription": "Run, inspect, audit and migrate cronlease ScheduledJobs",
            "description": (
                "kubectl cronlease runs a ScheduledJob now, lists its next fire times, history\n"
                "and dead letters, audits its slot ledger (exit 3 on a finding), backfills and\n"
                "replays runs, and adopts a CronJob with no double and no lost run.\n"
            ),
            "caveats": (
                "Needs python3 (3.11 or later) on the PATH.\n"
                "For completion of `kubectl cronlease <TAB>`, link the plugin under its\n"
                "completion name:\n"
                '  ln -s "$(command -v kubectl-cronlease)" \\\n'
                '    "$(dirname "$(command -v kubectl-cronlease)")/kubectl_complete-cronlease"\n'
            ),
            "platforms": [
                {
                    "selector": {
                        "matchExpressions": [
                            {"key": "os", "operator": "In", "values": ["linux", "darwin"]}
                        ]
                    },
                    "uri": uri,
                    "sha256": sha256(archive),
                    "files": [
                        {"from": NAME, "to": "."},
                        {"from": "LICENSE", "to": "."},
                    ],
                    "bin": NAME,
                }
            ],
        },
    }


def _block_dumper() -> Any:
    import yaml

    class Dumper(yaml.SafeDumper):
        """Multi-line texts (description, caveats) as literal blocks, as krew's index has them."""

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    return Dumper


def build_krew(
    out: Path = OUT, url_base: str | None = None, wheels: Path | None = None
) -> tuple[Path, Path]:
    """The archive and its manifest (cronlease.yaml: krew's index names a manifest after its
    plugin) from the wheel `build_wheel` left in `out` and the wheels it fetched (`wheels`,
    default `out`/wheels)."""
    import yaml  # the dev environment's (PyYAML): only this target writes YAML

    version = project()["version"]
    wheel = out / f"kubectl_cronlease-{version}-py3-none-any.whl"
    if not wheel.is_file():
        raise SystemExit(f"no {wheel}: run `make plugin-dist` first")
    archive = build_archive(build_zipapp(wheel, out, wheels or out / "wheels"), out, version)
    base = url_base or archive.parent.resolve().as_uri()
    data = manifest(archive, version, f"{base.rstrip('/')}/{archive.name}")
    target = out / "cronlease.yaml"
    target.write_text(yaml.dump(data, Dumper=_block_dumper(), sort_keys=False, width=100))
    return archive, target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", choices=("wheel", "krew"))
    parser.add_argument("--out", type=Path, default=OUT, help=f"output directory ({OUT})")
    parser.add_argument(
        "--wheels", type=Path, help="the dependencies' wheels, kept between builds (OUT/wheels)"
    )
    parser.add_argument(
        "--url-base",
        help="where the archive is published, for the manifest's uri (default: its file:// URL)",
    )
    args = parser.parse_args(argv)
    if args.target == "wheel":
        wheel = build_wheel(args.out, args.wheels)
        print(f"built {wheel} ({wheel.stat().st_size // 1024} KiB)")
    else:
        archive, target = build_krew(args.out, args.url_base, args.wheels)
        print(f"built {archive} ({archive.stat().st_size // 1024} KiB) and {target}")


if __name__ == "__main__":
    main()
