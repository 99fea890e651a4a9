"""How long reading a profile file at the size limit takes, and that one over it is refused without parsing.

Run (from the repository root; ~15 s on 2 shared cores):

    .venv/bin/python benchmarks/profile_file_limit.py

Writes a profile of just under `MAX_FILE_BYTES` (1 MiB: ~63,000 tag lines) and one of 10 MiB into a
temporary folder, then times `read_file` on each (median of 3). The first is the worst a valid-sized file
can cost (it parses fully); the second must be refused by its size, in milliseconds. Timings on a shared
machine are noisy: compare runs on the same machine only.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from sagellm.errors import InputError
from sagellm.profiles.loader import MAX_FILE_BYTES, read_file


def write_profile(path: Path, size: int) -> Path:
    """A syntactically valid profile of about `size` bytes (one tag per line)."""
    head = "name: big\nextends: max-throughput\ntags:\n"
    lines, total, i = [head], len(head), 0
    while total < size - 20:
        line = f"  k{i}: v{i}\n"
        lines.append(line)
        total, i = total + len(line), i + 1
    path.write_text("".join(lines))
    return path


def median_seconds(path: Path, repeats: int = 3) -> tuple[float, str]:
    """Median wall time of read_file and how it ended."""
    times, outcome = [], "read"
    for _ in range(repeats):
        started = time.perf_counter()
        try:
            read_file(path)
        except InputError as exc:
            outcome = f"refused: {str(exc)[:60]}…"
        times.append(time.perf_counter() - started)
    return statistics.median(times), outcome


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        for name, size in (("at-limit.yaml", MAX_FILE_BYTES), ("ten-mib.yaml", 10 * MAX_FILE_BYTES)):
            path = write_profile(Path(folder) / name, size)
            seconds, outcome = median_seconds(path)
            print(f"{name:<14} {path.stat().st_size:>9} bytes  {seconds * 1000:>8.1f} ms  {outcome}")


if __name__ == "__main__":
    main()
