"""Whether the target itself failed, read from the measured levels (a pure function of the records)."""

from __future__ import annotations

from sagellm.bench.load.level import LevelResult
from sagellm.results.picks import MAX_ERROR_RATE
from sagellm.results.records import RequestRecord


def unanswered(record: RequestRecord) -> bool:
    """A request the endpoint did not answer: no token and no HTTP response (refused, reset), or a timeout
    after the endpoint went silent on it."""
    return not record.ok and ((record.ttft_s is None and record.status is None) or went_silent(record))


def went_silent(record: RequestRecord) -> bool:
    """A timeout with nothing heard in the second half of the wait: no token at all, or a stream that stopped
    (a hung endpoint). A stream still sending tokens when the client gave up is slow, not silent: saturation."""
    if record.error_kind != "timeout":
        return False
    heard_s = 0.0 if record.ttft_s is None else record.ttft_s + sum(record.token_gaps_s)
    return record.e2e_s - heard_s > record.e2e_s / 2


def target_failure(levels: list[LevelResult]) -> str | None:
    """One line when the target failed rather than the workload finding its limits, else None.

    Failed: no request succeeded at all; or the sweep stopped at a level where, after the run's last success,
    every request went unanswered (the endpoint crashed or hung mid-sweep, streams in flight included), or where more requests than the
    error limit failed as `other` (streams cut short, connections reset, 5xx). Errors the endpoint answered as
    its limits (429, 422, throttling, its own timeout) are findings, for the report and the gate."""
    records = [r for level in levels for r in level.records]  # in the order they completed
    if not records:
        return None
    last_ok = max((i for i, r in enumerate(records) if r.ok), default=None)
    if last_ok is None:
        first = next(r for r in records if not r.ok)
        return f"no request succeeded: {first.error_kind}: {first.error}"
    after = records[last_ok + 1:]
    level = levels[-1]
    if level.stopped_reason is not None and after and all(unanswered(r) for r in after):
        return (f"the endpoint stopped answering at {_named(level)}: none of the {len(after)} "
                f"request(s) after the last success got an answer (last: {after[-1].error})")
    # The sweep stopped on errors that are the target failing (not a limit it answered with).
    broken = [r for r in level.records if not r.ok and r.error_kind == "other"]
    if level.stopped_reason is not None and len(broken) > MAX_ERROR_RATE * len(level.records):
        return (f"the target failed {len(broken)} of {len(level.records)} requests at {_named(level)}: "
                f"{broken[0].error}")
    return None


def _named(level: LevelResult) -> str:
    return f"concurrency {level.concurrency}" if level.concurrency is not None else f"request rate {level.load}"
