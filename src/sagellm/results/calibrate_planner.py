"""`sagellm calibrate`: measured runs (results.json) → a stored step-time correction per model × instance × container.

This is where results files are read; the planner is handed plain numbers (Observation) and fits them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from sagellm import __version__
from sagellm.engines import kind_of_image, variable_names
from sagellm.errors import InputError
from sagellm.planner import Observation, Payload, Shape, fit_calibration
from sagellm.profiles import Design, design_for
from sagellm.profiles.calibration import CalibrationFile, FittedRun, calibration_path, save_calibration
from sagellm.results.schema import Results, load_results

MAX_ERROR_RATE = 0.05  # levels with more errors measured something other than step times
# Three multipliers from one level fit its three metrics exactly and nothing else: a file no one should trust.
MIN_LEVELS = 2


@dataclass(frozen=True)
class _Run:
    path: Path
    results: Results
    design: Design

    @property
    def key(self) -> tuple[str, str, str, str | None]:
        """Model × instance type × container (kind, version): what one calibration file covers."""
        d = self.design
        return d.copies[0].model.hf_id, d.instance.instance_type, d.container, d.container_version


def _results_path(run: Path) -> Path:
    return run / "results.json" if run.is_dir() else run


def _int_env(env: dict[str, str], *names: str) -> int | None:
    for name in names:
        if env.get(name, "").isdigit():
            return int(env[name])
    return None


def _load(run: Path, profiles_dir: Path | None, accept_emulated: bool) -> _Run:
    """Read a run and rebuild the serving shape it measured (its profile, with the limits it deployed)."""
    path = _results_path(run)
    results = load_results(path)
    r = results.run
    if r.emulated and not accept_emulated:
        raise InputError(f"{path}: run.emulated is true: an emulated run only replays the planner; calibrate "
                         "from a run against a real endpoint (--target sagemaker or http)")
    if not r.profile or not r.instance_type:  # an http run of a server sagellm did not deploy
        raise InputError(f"{path}: run.profile: the run names no profile and instance type; calibrate needs the "
                         "shape it measured: bench again with --profile, --model and --instance")
    env = r.environment
    try:
        design = design_for(r.profile, r.model, r.instance_type, payload=Payload(r.input_tokens, r.output_tokens),
                            region=r.region, profiles_dir=profiles_dir, instance_count=r.instance_count,
                            tensor_parallel=_int_env(env, *variable_names("tensor_parallel")),
                            # The engine the run served (a bench's --engine), known by its image.
                            engine=kind_of_image(r.container) if r.container else None)
    except InputError as exc:
        raise InputError([f"{path}: {m}" for m in exc.messages]) from None
    return _Run(path, results, design)


def _observations(run: _Run) -> list[Observation]:
    """The run's usable levels, against the shape it deployed (the limits from its environment, no calibration)."""
    env = run.results.run.environment
    base: Shape = replace(run.design.shape(), calibration=None)
    shape = replace(
        base,
        max_concurrent_requests=_int_env(env, *variable_names("max_concurrent_requests"))
        or base.max_concurrent_requests,
        max_batch_total_tokens=_int_env(env, "MAX_BATCH_TOTAL_TOKENS") or base.max_batch_total_tokens,
    )
    r = run.results.run
    payload = Payload(r.input_tokens, r.output_tokens)
    return [
        Observation(shape, payload, lv.concurrency, ms_per_token=lv.latency_ms_per_token.p50,
                    ttft_ms=lv.ttft_ms.p50, throughput_tokens_per_s=lv.throughput_tokens_per_s or None)
        # Open-loop levels have no closed-loop concurrency the planner could be fitted to.
        for lv in run.results.levels
        if lv.concurrency is not None and lv.ok > 0 and lv.error_rate <= MAX_ERROR_RATE
    ]


def _percent(errors: dict[str, float]) -> str:
    names = {"ms_per_token": "ms/token", "ttft_ms": "TTFT", "throughput": "throughput"}
    return ", ".join(f"{names[k]} {v:.1f}%" for k, v in errors.items())


def calibrate_runs(runs: Sequence[Path], profiles_dir: Path | None, *, runs_profiles_dir: Path | None = None,
                   accept_emulated: bool = False) -> list[str]:
    """Fit and store one calibration per model × instance type × container in `profiles_dir`; one line per file
    written. The runs' profiles are read from `runs_profiles_dir` (default `profiles_dir`); `recommend --verify
    --target sagemaker` accepts what the SageMaker runtime it was pointed at measured, an emulator included."""
    loaded = [_load(run, runs_profiles_dir or profiles_dir, accept_emulated) for run in runs]
    groups: dict[tuple[str, str, str, str | None], list[_Run]] = {}
    for run in loaded:
        groups.setdefault(run.key, []).append(run)
    lines = []
    for (model, instance_type, container, version), members in groups.items():
        observations = [obs for run in members for obs in _observations(run)]
        if 0 < len(observations) < MIN_LEVELS:  # none at all: the fit says why
            raise InputError(f"{', '.join(str(r.path) for r in members)}: {len(observations)} closed-loop level(s) "
                             f"with under {MAX_ERROR_RATE:.0%} errors; a fit needs at least {MIN_LEVELS} (bench "
                             "more --concurrency levels; open-loop levels have no concurrency to fit)")
        try:
            fit = fit_calibration(observations)
        except ValueError as exc:
            raise InputError(f"{', '.join(str(r.path) for r in members)}: {exc}") from None
        path = calibration_path(profiles_dir, model, instance_type, container, version)
        cal = fit.calibration
        save_calibration(path, CalibrationFile(
            model=model, instance_type=instance_type, container=container, container_version=version,
            generation=members[0].design.generation, decode_floor=cal.decode_floor,
            decode_per_sequence=cal.decode_per_sequence, prefill=cal.prefill,
            runs=[FittedRun(results=str(r.path), started_at=r.results.run.started_at.isoformat(),
                            target=r.results.run.target, levels=len(_observations(r))) for r in members],
            error_pct_before={k: round(v, 1) for k, v in fit.error_before.items()},
            error_pct_after={k: round(v, 1) for k, v in fit.error_after.items()},
            sagellm_version=__version__,
        ))
        lines.append(f"wrote {path}: {cal.describe()} from {len(members)} run(s), {fit.levels} level(s); "
                     f"mean error {_percent(fit.error_before)} → {_percent(fit.error_after)}")
    return lines
