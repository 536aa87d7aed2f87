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
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from cronlease.kubectl.cli import build_parser, connect
from cronlease.kubectl.errors import PluginError
from cronlease.kubectl.impersonation import impersonation

if TYPE_CHECKING:  # imported where a name is completed: commands and flags need no cluster
    from cronlease.kubectl.context import Context

# cobra's ShellCompDirective bits (spf13/cobra completions.go).
DEFAULT = 0  # the shell may complete file names
NO_SPACE = 2
NO_FILE = 4

# The flags whose value is a ScheduledJob's name (a command's is its positional `name`).
NAME_FLAGS = frozenset({"--dead-letters"})
# Seconds for the API call of a completion: a shell waits on it.
TIMEOUT_SECONDS = 5.0


def _commands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[Any]:
    (commands,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return commands


def _first_positional(parser: argparse.ArgumentParser) -> str | None:
    """The dest of the command's first positional (`name` for a ScheduledJob's), or None."""
    return next((a.dest for a in parser._actions if not a.option_strings), None)


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
    """The candidates for the last of `words` and cobra's directive. A cluster or kubeconfig it
    cannot read, or a namespace it refuses, completes nothing: kubectl shows a completion's
    candidates, never its errors."""
    try:
        return _complete(words)
    except PluginError:
        return [], NO_FILE


def _complete(words: Sequence[str]) -> tuple[list[str], int]:
    if not words:
        words = [""]
    *before, current = words
    commands = _commands(build_parser())
    if not before:
        if current.startswith("-"):
            return _match(["--help", "--version"], current), NO_FILE
        helps = [f"{c.dest}\t{c.help or ''}" for c in commands._choices_actions]
        return _match(helps, current), NO_FILE
    command = before[0]
    parser = commands.choices.get(command)
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
        positional = _first_positional(parser)
        if positional == "name":
            return _match(_listed(typed, _scheduled_jobs), current), NO_FILE
        if command == "adopt":
            cronjobs = _listed(typed, lambda ctx: ctx.api.cronjobs(ctx.ns))
            return _match([f"cronjob/{n}" for n in cronjobs], current), NO_FILE
    return [], NO_FILE


def _values(action: argparse.Action, typed: _Typed, current: str) -> tuple[list[str], int]:
    """The values of a flag: its choices, names from the cluster, or files."""
    if action.choices is not None:
        return _match([str(c) for c in action.choices], current), NO_FILE
    option = action.option_strings[-1]
    if option == "--kubeconfig":
        return [], DEFAULT  # a file: the shell completes it
    if option in NAME_FLAGS:
        return _match(_listed(typed, _scheduled_jobs), current), NO_FILE
    if option == "--namespace":
        return _match(_listed(typed, lambda ctx: ctx.api.namespaces()), current), NO_FILE
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


def _listed(typed: _Typed, listing: Callable[[Context], list[dict[str, Any]]]) -> list[str]:
    """The names of what `listing` finds with the typed flags: -n (or the context's namespace),
    --context, --kubeconfig, --as."""
    from cronlease.kubectl.context import Context

    groups = typed.values.get("as_group", [])
    who = impersonation(typed.last("as_user"), groups, typed.last("as_uid"))
    kubeconfig, context = typed.last("kubeconfig"), typed.last("context")
    ctx = Context(
        connect=lambda: connect(kubeconfig, context, who, TIMEOUT_SECONDS),
        namespace=typed.last("namespace"),
        all_namespaces=False,
        output="table",
        out=sys.stdout,
        err=sys.stderr,
        colour=False,
    )
    return _names(listing(ctx))


def _scheduled_jobs(ctx: Context) -> list[dict[str, Any]]:
    return ctx.api.scheduled_jobs(ctx.ns)


def _contexts(typed: _Typed) -> list[str]:
    try:
        from cronlease.kubectl.client import contexts
    except ImportError:  # the operator's environment holds no client: no kubeconfig reader
        return []
    return contexts(typed.last("kubeconfig"))


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
