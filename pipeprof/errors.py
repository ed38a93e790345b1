"""The one exception type user mistakes travel in: a one-line message and an exit code."""

from __future__ import annotations


class PipeprofError(Exception):
    """A problem the user can fix. The CLI prints ``message`` as one line, no traceback."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.message = " ".join(message.split())  # always one line
        self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message
