"""`sagellm gate`: thresholds and a baseline on a finished run."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from sagellm.cli.app import app
from sagellm.cli.options import (
    AllowIncomparable,
    Json,
)
from sagellm.errors import ExitStatus, InputError


@app.command()
def gate(
    results: Annotated[Path, typer.Argument(help="results.json of a finished run")],
    thresholds: Annotated[Path | None, typer.Option("--thresholds", help="YAML rules")] = None,
    baseline: Annotated[Path | None, typer.Option("--baseline", help="results.json to compare against")] = None,
    allow_incomparable: AllowIncomparable = False,
    out: Annotated[Path | None, typer.Option("--out", help="folder for the verdict: results.json, report.md, "
                                             "junit.xml, curve.png, results.csv (default: gate/ beside RESULTS; "
                                             "never the run's own folder)")] = None,
    json_out: Json = False,
) -> int:
    """Evaluate thresholds (and/or a baseline) on a finished run; the run's own files are left as they are.

    Exit 0 pass, 1 fail (every violation printed), 2 bad input (thresholds, a level the run never planned,
    a baseline that is not comparable), or the run's own 3/130 when it failed or was interrupted.
    """
    from sagellm.results.gate import gate as evaluate
    from sagellm.results.gate import planned_levels, read_gate, slo_mismatch, violation_lines
    from sagellm.results.report import write_report
    from sagellm.results.schema import load_results, write_results

    out = out or results.parent / "gate"
    if out.resolve() == results.parent.resolve():
        raise InputError(f"--out: {out} is the run's own folder and its files would be overwritten "
                         "(pick another folder, or leave --out out for gate/ beside it)")
    run = load_results(results)
    rules, base = read_gate(thresholds, baseline, run.run, planned_levels(run), allow_incomparable=allow_incomparable)
    if rules is None:
        raise InputError("--thresholds/--baseline: nothing to check (give a thresholds file, a baseline, or both)")
    if problems := slo_mismatch(rules, run.run):
        raise InputError([f"{thresholds}: {p}" for p in problems])
    verdict = evaluate(run, rules, base)
    updated = run.model_copy(update={"gate": verdict})
    out.mkdir(parents=True, exist_ok=True)
    write_results(out / "results.json", updated)
    write_report(out, updated)
    if json_out:
        print(verdict.model_dump_json(indent=2))
    else:
        for line in violation_lines(verdict):
            print(line)
        for difference in verdict.incomparable:
            print(f"NOTE baseline differs (--allow-incomparable): {difference}")
        print(f"{'PASS' if verdict.passed else 'FAIL'}: {len(verdict.rules)} rule(s), "
              f"{len(verdict.violations)} violation(s); written to {out}/")
    if run.failure is not None:  # an incomplete run never passes, whatever its rules say
        print(f"sagellm: error: the run did not complete: {run.failure.message}", file=sys.stderr)
        return run.failure.exit_status
    return int(ExitStatus.OK if verdict.passed else ExitStatus.GATE_FAILED)
