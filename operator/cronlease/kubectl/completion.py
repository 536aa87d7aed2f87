"""`kubectl_complete-cronlease`: completion of `kubectl cronlease ...` through kubectl's plugin
completion (kubectl 1.26+). kubectl runs this executable, found on the PATH beside the plugin,
with the words after `kubectl cronlease` (the last one the word being completed, empty after a
space) and reads one candidate a line (`candidate<TAB>description`), then `:<directive>`, cobra's
ShellCompDirective, as cobra's own `__complete` prints them.

Commands and flags come from the plugin's own parser (cli.build_parser), so they cannot drift
from what it accepts; ScheduledJob and CronJob names come from the cluster, with the -n,
--context, --kubeconfig and --as flags already typed. Completion must never print an error or
hang a shell: a cluster it cannot reach completes no name."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from cronlease.kubectl.cli import build_parser, connect
from cronlease.kubectl.errors import PluginError
from cronlease.kubectl.impersonation import impersonation

if TYPE_CHECKING:
    from cronlease.kubectl.client import Api

# cobra's ShellCompDirective bits (spf13/cobra completions.go).
DEFAULT = 0  # the shell may complete file names
NO_SPACE = 2
NO_FILE = 4

# The commands whose first positional is a ScheduledJob's name, and the flags whose value is one.
NAMED = frozenset(
    {"run-now", "next", "history", "suspend", "resume", "backfill", "dead-letters", "audit"}
)
NAME_FLAGS = frozenset({"--dead-letters"})
# Seconds for the API call of a completion: a shell waits on it.
TIMEOUT_SECONDS = 5.0


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _descriptions(parser: argparse.ArgumentParser) -> dict[str, str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {choice.dest: choice.help or "" for choice in action._choices_actions}
    return {}


def _option(parser: argparse.ArgumentParser, word: str) -> argparse.Action | None:
    """The option `word` names (`--output`, `-o`), or None."""
    return next((a for a in parser._actions if word in a.option_strings), None)


def _takes_value(action: argparse.Action | None) -> bool:
    return action is not None and action.nargs != 0


class _Typed:
    """What the words before the one being completed say: the command, the flags and their
    values, the positionals."""

    def __init__(self, parser: argparse.ArgumentParser, words: Sequence[str]) -> None:
        self.values: dict[str, list[str]] = {}
        self.positionals: list[str] = []
        self.pending: argparse.Action | None = None  # a flag whose value is being completed
        waiting: argparse.Action | None = None
        for word in words:
            if waiting is not None:
                self.values.setdefault(waiting.dest, []).append(word)
                waiting = None
            elif word.startswith("-") and word != "-":
                flag, has_value, value = word.partition("=")
                action = _option(parser, flag)
                if has_value and action is not None:
                    self.values.setdefault(action.dest, []).append(value)
                elif _takes_value(action):
                    waiting = action
            else:
                self.positionals.append(word)
        self.pending = waiting

    def last(self, dest: str) -> str | None:
        values = self.values.get(dest)
        return values[-1] if values else None


def complete(words: Sequence[str]) -> tuple[list[str], int]:
    """The candidates for the last of `words` and cobra's directive."""
    if not words:
        words = [""]
    *before, current = words
    root = build_parser()
    commands = _subcommands(root)
    if not before:
        if current.startswith("-"):
            return _match(["--help", "--version"], current), NO_FILE
        helps = _descriptions(root)
        return _match([f"{name}\t{helps.get(name, '')}" for name in commands], current), NO_FILE
    command = before[0]
    parser = commands.get(command)
    if parser is None:
        return [], NO_FILE
    typed = _Typed(parser, before[1:])
    flag, has_value, value = current.partition("=")
    if typed.pending is not None:
        return _values(typed.pending, typed, current)
    if current.startswith("-") and has_value:
        action = _option(parser, flag)
        if action is None:
            return [], NO_FILE
        found, directive = _values(action, typed, value)
        return [f"{flag}={candidate}" for candidate in found], directive
    if current.startswith("-"):
        options = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
        return _match(options, current), NO_FILE
    if not typed.positionals:
        if command in NAMED:
            return _match(_scheduled_jobs(typed), current), NO_FILE
        if command == "adopt":
            return _match([f"cronjob/{n}" for n in _cronjobs(typed)], current), NO_FILE
    return [], NO_FILE


def _values(action: argparse.Action, typed: _Typed, current: str) -> tuple[list[str], int]:
    """The values of a flag: its choices, names from the cluster, or files."""
    if action.choices is not None:
        return _match([str(c) for c in action.choices], current), NO_FILE
    option = action.option_strings[-1]
    if option == "--kubeconfig":
        return [], DEFAULT  # a file: the shell completes it
    if option in NAME_FLAGS:
        return _match(_scheduled_jobs(typed), current), NO_FILE
    if option == "--namespace":
        return _match(_namespaces(typed), current), NO_FILE
    if option == "--context":
        return _match(_contexts(typed), current), NO_FILE
    return [], NO_FILE


def _match(candidates: Sequence[str], prefix: str) -> list[str]:
    return [c for c in candidates if c.startswith(prefix)]


# --- the cluster -------------------------------------------------------------------------------


def _names(listing: list[dict[str, object]]) -> list[str]:
    names = []
    for item in listing:
        metadata = item.get("metadata")
        name = metadata.get("name") if isinstance(metadata, dict) else None
        if isinstance(name, str):
            names.append(name)
    return sorted(names)


def _api(typed: _Typed) -> Api:
    groups = typed.values.get("as_group", [])
    who = impersonation(typed.last("as_user"), groups, typed.last("as_uid"))
    return connect(typed.last("kubeconfig"), typed.last("context"), who, TIMEOUT_SECONDS)


def _scheduled_jobs(typed: _Typed) -> list[str]:
    try:
        api = _api(typed)
        return _names(api.scheduled_jobs(typed.last("namespace") or api.default_namespace))
    except PluginError:
        return []


def _cronjobs(typed: _Typed) -> list[str]:
    try:
        api = _api(typed)
        return _names(api.cronjobs(typed.last("namespace") or api.default_namespace))
    except PluginError:
        return []


def _namespaces(typed: _Typed) -> list[str]:
    try:
        return _names(_api(typed).namespaces())
    except PluginError:
        return []


def _contexts(typed: _Typed) -> list[str]:
    try:
        from cronlease.kubectl.client import contexts

        return contexts(typed.last("kubeconfig"))
    except (ImportError, PluginError):
        return []


def write(candidates: Sequence[str], directive: int, out: TextIO) -> None:
    for candidate in candidates:
        out.write(candidate + "\n")
    out.write(f":{directive}\n")


def main(argv: Sequence[str] | None = None) -> None:
    words = sys.argv[1:] if argv is None else list(argv)
    try:
        candidates, directive = complete(words)
    except Exception:  # a completion never breaks the shell: nothing to offer, say so quietly
        candidates, directive = [], NO_FILE
    write(candidates, directive, sys.stdout)
    sys.stdout.flush()
