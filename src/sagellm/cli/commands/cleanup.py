"""`sagellm cleanup`: the stacks killed benches left behind."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from sagellm.cli.app import app
from sagellm.cli.options import region_option
from sagellm.errors import InputError


@app.command(epilog="Examples:\n\n"
             "  sagellm cleanup --dry-run               # list bench stacks and what would be deleted\n\n"
             "  sagellm cleanup --older-than 6h --yes   # in a scheduled job: delete without asking")
def cleanup(
    older_than: Annotated[str, typer.Option("--older-than", help="only stacks older than this: 30m, 2h, 1d")]
    = "1h",
    region: Annotated[str | None, typer.Option("--region", callback=region_option,
                                               help="the bench's region (default: your AWS configuration's region, "
                                               "else us-east-1)")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="list, do not delete")] = False,
    yes: Annotated[bool, typer.Option("--yes", help="delete without asking")] = False,
) -> None:
    """Delete the stacks bench runs left behind (a killed bench, --keep): whole stacks, through CloudFormation.

    Only stacks tagged sagellm:bench-run (set by `sagellm bench` alone) are considered; stacks deployed with
    `cdk deploy` or a team's own LlmEndpoint are never touched. A bench stack is kept while its bench still
    runs on this machine or while it is younger than --older-than. Shows what it will delete and asks first.
    """
    from sagellm.aws.account import choose_region, resolve_account
    from sagellm.aws.cleanup import delete_leftovers, find_leftovers
    from sagellm.catalog.regions import check_region
    from sagellm.errors import TargetError

    seconds = _duration(older_than)
    region, source = choose_region(region)
    check_region(region, source)
    session = resolve_account(region, bootstrap=False).session()  # credentials checked, one line if not
    survey = find_leftovers(session, seconds)
    for stack, reason in survey.kept:
        print(f"keep    {stack}: {reason}")
    for line in survey.unreadable:
        print(f"skip    {line} (could not read it)")
    for stack in survey.leftovers:
        print(f"delete  {stack}")
    if not survey.leftovers:
        print(f"no bench stacks older than {older_than} to delete in {region}")
    elif not dry_run:
        if not yes:
            if not sys.stdin.isatty():
                raise InputError(f"--yes: {len(survey.leftovers)} stack(s) to delete and no terminal to ask; "
                                 "pass --yes to delete them")
            if not typer.confirm(f"Delete {len(survey.leftovers)} stack(s) and everything in them?"):
                print("nothing deleted")
                return
        failures = delete_leftovers(session, survey.leftovers)
        if failures:
            raise TargetError(f"could not delete: {'; '.join(failures)}")
        print(f"deleted {len(survey.leftovers)} stack(s)")
    if survey.unreadable:
        raise TargetError(f"could not read {len(survey.unreadable)} listed stack(s); they were skipped")


def _duration(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    try:
        return float(text[:-1]) * units[text[-1]]
    except (KeyError, ValueError, IndexError):
        raise InputError(f"--older-than: {text!r} must be a number with s, m, h or d (e.g. 2h)") from None
