"""One folder for every temporary file of a sagellm command and its children, removed when the command ends.

The CDK CLI (`cdk-bootstrap*`), the CDK app it runs (jsii's `jsii-kernel-*` and `tmp*`) and the emulator child
(`sagellm-emulator-*`) write to the temporary folder, and a run stopped by a signal left theirs behind. All of
them read TMPDIR (node's os.tmpdir(), Python's tempfile), so a command points TMPDIR at its own
`sagellm-run-<pid>-*` folder and removes it on the way out. A run killed outright (SIGKILL) cannot: the next
command removes the folders of runs that are gone, told by a lock the kernel drops when its holder dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

PREFIX = "sagellm-run-"
_LOCK = ".owner.lock"  # held (flock) by the command that owns the folder, for as long as it runs


@contextlib.contextmanager
def run_scratch() -> Iterator[Path]:
    """While entered, TMPDIR (for children) and Python's tempfile point at a new folder this process owns."""
    base = Path(tempfile.gettempdir())
    remove_stale(base)
    folder = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=base))
    previous_env, previous_tempdir = os.environ.get("TMPDIR"), tempfile.tempdir
    with (folder / _LOCK).open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new folder: nobody else holds it
        os.environ["TMPDIR"] = tempfile.tempdir = str(folder)
        try:
            yield folder
        finally:
            if previous_env is None:
                os.environ.pop("TMPDIR", None)
            else:
                os.environ["TMPDIR"] = previous_env
            tempfile.tempdir = previous_tempdir
            shutil.rmtree(folder, ignore_errors=True)


def remove_stale(base: Path) -> list[Path]:
    """Remove the scratch folders in `base` whose command is gone; returns them."""
    removed = []
    for folder in base.glob(f"{PREFIX}*"):
        if folder.is_dir() and not folder.is_symlink() and _abandoned(folder):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _abandoned(folder: Path) -> bool:
    """Whether the command that made `folder` is gone: its lock is free, or (no lock yet) its process is."""
    try:
        fd = os.open(folder / _LOCK, os.O_RDONLY)
    except FileNotFoundError:  # killed between making the folder and locking it, or still about to lock
        pid = folder.name.removeprefix(PREFIX).split("-", 1)[0]
        return pid.isdigit() and not _alive(int(pid))
    except OSError:  # not ours to read: not ours to remove either
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held: the owner runs
        return False
    else:
        return True
    finally:
        os.close(fd)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
