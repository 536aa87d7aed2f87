"""`kubectl cronlease ...`: the arguments, kubectl's conventions, and the one rule for errors: a
problem the user can act on is one line on stderr and a non-zero exit, never a traceback
(`CRONLEASE_DEBUG=1` shows the traceback of an unexpected error, for a bug report)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from cronlease.core.names import distribution
from cronlease.kubectl.errors import EXIT_USAGE, PluginError
from cronlease.kubectl.impersonation import Impersonation, impersonation

if TYPE_CHECKING:
    from cronlease.kubectl.client import Api

# The chart's defaults (manifests/helm/cronlease): where the operator's Lease lives.
LEASE_NAMESPACE = "cronlease-system"
LEASE_NAME = "cronlease-leader"
# The plugin's own distribution (hack/plugin_dist.py builds it); in a checkout's environment the
# plugin is part of the operator's.
DISTRIBUTIONS = ("kubectl-cronlease", "cronlease")

# The -o formats a command prints, besides its table: `wide` and `name` where it lists objects
# (runs, dead letters, audited ScheduledJobs), `name` where it names what it wrote.
STRUCTURED = ("json", "yaml")
NAMES = (*STRUCTURED, "name")
LISTS = (*STRUCTURED, "wide", "name")

EPILOG = """\
exit codes:
  0  done (and, for audit, backfill and replay, nothing found)
  1  an error: the kubeconfig, the API server, an object, or bad input
  2  a usage error: an unknown command or flag, a missing argument
  3  a finding: audit found a slot missing or doubled (or an object it cannot audit), or a
     backfill or replay target failed

completion: kubectl_complete-cronlease (installed beside kubectl-cronlease) completes
commands, flags and ScheduledJob names after `kubectl cronlease <TAB>`.
"""


def version() -> str:
    """The installed distribution's version (the plugin's own, or the operator's in a checkout)."""
    return distribution.version(*DISTRIBUTIONS)


class _Version(argparse.Action):
    """--version, reading the distribution's metadata only when asked: the parser is built on
    every completion keystroke too."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        sys.stdout.write(f"kubectl-cronlease {version()}\n")
        parser.exit()


class _Parser(argparse.ArgumentParser):
    """argparse, with its usage errors as PluginErrors (exit 2, kubectl's usage code)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        # A subcommand's prog is "kubectl cronlease CMD"; the top level's is "kubectl cronlease".
        raise PluginError(f"{message} (see {self.prog} --help)", EXIT_USAGE)


def _common() -> _Parser:
    common = _Parser(add_help=False)
    common.add_argument("-n", "--namespace", help="namespace (default: the context's)")
    common.add_argument(
        "-A", "--all-namespaces", action="store_true", help="every namespace (where it applies)"
    )
    common.add_argument("--context", help="kubeconfig context to use")
    common.add_argument("--kubeconfig", help="path to the kubeconfig (default: $KUBECONFIG)")
    common.add_argument("--as", dest="as_user", metavar="USER", help="act as this user")
    common.add_argument(
        "--as-group",
        action="append",
        default=[],
        metavar="GROUP",
        help="act as this group (repeatable; needs --as)",
    )
    common.add_argument("--as-uid", metavar="UID", help="act as this uid (needs --as)")
    common.add_argument(
        "--timeout", type=float, default=120.0, help="seconds to wait for the operator (120)"
    )
    return common


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = _Parser(
        prog="kubectl cronlease",
        description="cronlease ScheduledJobs from kubectl: run, inspect, audit, migrate.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action=_Version, help="show the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def command(name: str, outputs: tuple[str, ...], summary: str) -> argparse.ArgumentParser:
        """A command: kubectl's flags, and the -o formats it prints besides its table."""
        p = sub.add_parser(name, parents=[common], help=summary)
        formats = " or ".join(", ".join(outputs).rsplit(", ", 1))
        p.add_argument("-o", "--output", choices=outputs, help=f"{formats} instead of a table")
        return p

    p = command("run-now", NAMES, "run a ScheduledJob now; print the Job")
    p.add_argument("name")

    p = command("next", STRUCTURED, "the next fire times (no cluster needed with --schedule)")
    p.add_argument("name", nargs="?")
    p.add_argument("--schedule", action="append", default=[], help="cron expression (repeatable)")
    p.add_argument("--tz", help="IANA time zone for --schedule (default UTC)")
    p.add_argument("-c", "--count", type=int, default=5, help="how many (5)")
    p.add_argument("--from", dest="after", help="list from this time (default now)")

    p = command("history", LISTS, "runs: trigger, attempts, result, lag")
    p.add_argument("name")

    for verb in ("suspend", "resume"):
        p = command(verb, NAMES, f"{verb} ScheduledJobs by name or -l")
        p.add_argument("name", nargs="?")
        p.add_argument("-l", "--selector", help="label selector")

    p = command("backfill", STRUCTURED, "run a past window's slots, and follow")
    p.add_argument("name")
    p.add_argument("--from", dest="low", required=True)
    p.add_argument("--to", dest="high", required=True)
    p.add_argument("--policy", choices=("Forbid", "Allow"), default="Forbid")

    p = command("replay", STRUCTURED, "run runs again (or every dead letter)")
    p.add_argument("runs", nargs="*", metavar="RUN")
    p.add_argument("--dead-letters", metavar="SCHEDULEDJOB", help="replay all its dead letters")
    p.add_argument("--policy", choices=("Forbid", "Allow"), default="Forbid")

    p = command("dead-letters", LISTS, "runs whose attempts all failed")
    p.add_argument("name", nargs="?")

    p = command("audit", LISTS, "the slot ledger; exits 3 if a slot is missing or doubled")
    p.add_argument("name", nargs="?")
    p.add_argument("--from", dest="low", help="window start (default 1h ago)")
    p.add_argument("--to", dest="high", help="window end (default now)")

    p = command("adopt", STRUCTURED, "take over a CronJob: no double, no loss")
    p.add_argument("target", metavar="cronjob/NAME")
    p.add_argument("--dry-run", action="store_true", help="print the ScheduledJob and what differs")
    p.add_argument(
        "--time-zone",
        default="UTC",
        help="the zone a CronJob without spec.timeZone runs in (kube-controller-manager's; UTC)",
    )

    p = command("leader", STRUCTURED, "the Lease holder, its token, replicas")
    p.add_argument("--lease-namespace", default=LEASE_NAMESPACE)
    p.add_argument("--lease-name", default=LEASE_NAME)
    return parser


def connect(
    kubeconfig: str | None,
    context: str | None,
    impersonate: Impersonation | None = None,
    timeout: float | None = None,
) -> Api:
    """The API client, imported only by commands that reach a cluster (`next --schedule` lints
    anywhere, the operator's environment included)."""
    try:
        from cronlease.kubectl.client import Api
    except ImportError as error:  # the operator's environment, which must not hold the client
        raise PluginError(
            f"the Python package `kubernetes` (the official client) is missing ({error}): "
            "install the plugin's own distribution, kubectl-cronlease, which brings it "
            f"(`pipx install kubectl_cronlease-{version()}-py3-none-any.whl`, built by "
            "`make plugin-dist`), or `pip install kubernetes` into this environment"
        ) from None
    return Api(kubeconfig, context, impersonate, timeout)


def run(argv: Sequence[str], out: TextIO, err: TextIO) -> int:
    # Imported here: `--help` and usage errors need neither the client nor the schedule code.
    from cronlease.kubectl import adopt, audit, commands, runrequests
    from cronlease.kubectl.context import Context

    args = build_parser().parse_args(argv)
    who = impersonation(args.as_user, args.as_group, args.as_uid)
    ctx = Context(
        connect=lambda: connect(args.kubeconfig, args.context, who),
        namespace=args.namespace,
        all_namespaces=args.all_namespaces,
        output=args.output or "table",
        out=out,
        err=err,
        colour=out.isatty() and "NO_COLOR" not in os.environ,
        timeout=args.timeout,
    )
    if args.timeout <= 0:
        raise PluginError("--timeout: must be positive")
    command = args.command
    if command == "run-now":
        return commands.cmd_run_now(ctx, args.name)
    if command == "next":
        return commands.cmd_next(ctx, args.name, args.schedule, args.tz, args.count, args.after)
    if command == "history":
        return commands.cmd_history(ctx, args.name)
    if command in ("suspend", "resume"):
        return commands.cmd_suspend(ctx, args.name, args.selector, command == "suspend")
    if command == "backfill":
        return runrequests.cmd_backfill(ctx, args.name, args.low, args.high, args.policy)
    if command == "replay":
        return runrequests.cmd_replay(ctx, args.runs, args.dead_letters, args.policy)
    if command == "dead-letters":
        return commands.cmd_dead_letters(ctx, args.name)
    if command == "audit":
        return audit.cmd_audit(ctx, args.name, args.low, args.high)
    if command == "adopt":
        return adopt.cmd_adopt(ctx, args.target, args.dry_run, args.time_zone)
    assert command == "leader"
    return commands.cmd_leader(ctx, args.lease_namespace, args.lease_name)


def main(argv: Sequence[str] | None = None) -> None:
    arguments = sys.argv[1:] if argv is None else list(argv)
    try:
        code = run(arguments, sys.stdout, sys.stderr)
    except PluginError as error:
        sys.stderr.write(f"error: {error}\n")
        code = error.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        code = 130
    except Exception as error:  # a bug: still one line, unless asked for the traceback
        if os.environ.get("CRONLEASE_DEBUG"):
            raise
        sys.stderr.write(f"error: unexpected {type(error).__name__}: {error}\n")
        code = 1
    sys.stdout.flush()
    raise SystemExit(code)
