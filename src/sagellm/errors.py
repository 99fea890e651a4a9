"""Exit codes and the expected errors that the CLI prints as one line."""

from __future__ import annotations

from enum import IntEnum


class ExitStatus(IntEnum):
    """Process exit codes (a contract: pipelines branch on them)."""

    OK = 0
    GATE_FAILED = 1
    BAD_INPUT = 2
    TARGET_FAILED = 3
    INTERRUPTED = 130


class SagellmError(Exception):
    """An expected failure: printed as one line, never as a traceback."""

    exit_status = ExitStatus.TARGET_FAILED


class InputError(SagellmError):
    """Bad input from the user: a profile, a flag, a thresholds file (exit 2)."""

    exit_status = ExitStatus.BAD_INPUT

    def __init__(self, messages: str | list[str]):
        self.messages = [messages] if isinstance(messages, str) else list(messages)
        super().__init__("\n".join(self.messages))


class TargetError(SagellmError):
    """The endpoint or the infrastructure under it failed (exit 3)."""

    exit_status = ExitStatus.TARGET_FAILED
