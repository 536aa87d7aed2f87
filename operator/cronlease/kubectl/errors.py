"""The one exception the plugin reports as it is: a clear line for the user, and an exit code.

The exit codes, which scripts branch on (and `kubectl cronlease --help` lists):
0 done, nothing found; 1 an error (the API server, the kubeconfig, an object, bad input);
2 a usage error (an unknown flag or command); 3 a finding: the command worked and found a
problem (a slot missing or doubled, a backfill or replay target that failed)."""

from __future__ import annotations

EXIT_ERROR = 1
EXIT_USAGE = 2
# Distinct from 1 so that a CI gate on `audit` does not mistake a lost connection for a finding,
# nor a finding for a flaky network.
EXIT_FINDING = 3


class PluginError(Exception):
    """Bad input or an unusable object: its message is printed on one line, no traceback."""

    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.exit_code = exit_code
