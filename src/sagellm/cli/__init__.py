"""The `sagellm` command: thin commands that parse, call the library, render. Heavy imports stay lazy.

One module per command (a group's holds its subcommands) in commands/; importing one registers it on the app."""

from __future__ import annotations

import atexit
import copy
import gc
import sys

import typer
from typer.main import get_command_name

from sagellm.cli.app import app
from sagellm.cli.coercion import defer_typer_coercion
from sagellm.errors import ExitStatus, SagellmError
from sagellm.scratch import run_scratch

# The commands register in import order, which is the order `sagellm --help` lists them in: not sorted.
# isort: off
from sagellm.cli.commands import (  # noqa: F401 (registers)
    bench,
    cleanup,
    models,
    instances,
    plan,
    calibrate,
    init,
    cdk,
    recommend,
    gate,
    report,
    emulate,
    local_aws,
    profiles,
    results,
    weights,
    workload,
)
# isort: on

__all__ = ["app", "main"]

defer_typer_coercion()  # an option's pydantic adapter only for a value that needs one

# Commands that run one short computation whose objects live until it prints (`plan`: imports, then a few thousand
# simulated requests): the cyclic garbage collector would walk them again and again and free nothing worth it
# (about 15 % of `sagellm plan`'s CPU); it is off while they run, and the interpreter's last collection on its way
# out skips them (gc.freeze at exit, before that collection: about 0.05 s more).
WITHOUT_CYCLIC_GC = frozenset({"plan"})


def _command_name(argv: list[str]) -> str | None:
    """The command (or group) `argv` names: its first word after the global options, which are flags only."""
    return next((arg for arg in argv[1:] if not arg.startswith("-")), None)


def _app_for(argv: list[str]) -> typer.Typer:
    """The app with only the command (or group) `argv` names after the global flags, or the whole app (no command,
    --help, a misspelling): Typer builds every registered command's options on each call, evaluating each one's
    annotations (about 50 ms of `sagellm plan`'s CPU), and only one runs."""
    name = _command_name(argv)
    commands = [c for c in app.registered_commands
                if (c.name or (get_command_name(c.callback.__name__) if c.callback else None)) == name]
    groups = [g for g in app.registered_groups
              if (g.name or (g.typer_instance.info.name if g.typer_instance else None)) == name]
    if name is None or not (commands or groups):
        return app
    only = copy.copy(app)
    only.registered_commands, only.registered_groups = commands, groups
    return only


def _usage_line(exc: typer.TyperException, argv: list[str]) -> str:
    """A usage error as one line: the option, the value given, what is wrong, where to read more."""
    text = exc.format_message()
    param = getattr(exc, "param", None)
    option = getattr(exc, "option_name", None)
    if isinstance(exc, typer.BadParameter) and param is not None and param.opts and "Missing" not in text:
        flag = param.opts[0]
        given = _given(argv, param.opts)
        text = f"{flag}: {given!r}: {exc.message}" if given is not None else f"{flag}: {exc.message}"
    elif option and getattr(exc, "possibilities", None) is not None:
        close = sorted(exc.possibilities)  # type: ignore[attr-defined]
        text = f"{option}: no such option" + (f"; did you mean {', '.join(close)}?" if close else "")
    ctx = getattr(exc, "ctx", None)
    command = ctx.command_path if ctx is not None else "sagellm"
    return f"{' '.join(text.split())} (see `{command} --help`)"


def _given(argv: list[str], opts: list[str]) -> str | None:
    """The value given on the command line for an option (`--x 1` or `--x=1`)."""
    for i, arg in enumerate(argv):
        if arg in opts and i + 1 < len(argv):
            return argv[i + 1]
        name, _, value = arg.partition("=")
        if name in opts and _:
            return value
    return None


def main() -> None:
    """Entry point: expected errors become one line on stderr and an exit code; --debug shows tracebacks."""
    debug = "--debug" in sys.argv
    if debug:
        sys.argv.remove("--debug")
    collecting = gc.isenabled() and _command_name(sys.argv) in WITHOUT_CYCLIC_GC
    if collecting:
        gc.disable()
        atexit.unregister(gc.freeze)  # once, however often main() runs in one process
        atexit.register(gc.freeze)
    try:
        with run_scratch():  # every temporary file of the command and its children, removed on the way out
            result = _app_for(sys.argv)(standalone_mode=False)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        sys.exit(ExitStatus.INTERRUPTED)
    except typer.TyperException as exc:  # usage errors (typer ships its own click)
        if type(exc).__name__ == "NoArgsIsHelpError":
            exc.show()  # type: ignore[attr-defined]
        else:
            print(f"sagellm: error: {_usage_line(exc, sys.argv)}", file=sys.stderr)
        sys.exit(ExitStatus.BAD_INPUT)
    except SagellmError as exc:
        if debug:
            raise
        for line in str(exc).splitlines():
            print(f"sagellm: error: {line}", file=sys.stderr)
        sys.exit(exc.exit_status)
    except Exception as exc:  # a bug: one line (exit 3, never 1, which means "gate failed")
        if debug:
            raise
        print(f"sagellm: internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)",
              file=sys.stderr)
        sys.exit(ExitStatus.TARGET_FAILED)
    finally:
        if collecting:  # main() called in a longer-lived process (a test) leaves the collector as it found it
            gc.enable()
    sys.exit(result if isinstance(result, int) else ExitStatus.OK)
