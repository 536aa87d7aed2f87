"""The one exception the plugin reports as it is: a clear line for the user, and an exit code."""

from __future__ import annotations


class PluginError(Exception):
    """Bad input or an unusable object: its message is printed on one line, no traceback."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code
