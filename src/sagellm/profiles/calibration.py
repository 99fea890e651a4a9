"""Measured corrections of the planner's step times, kept as small YAML files next to the profiles.

`sagellm calibrate RUN…` writes one file per model × instance type × container to
`<profiles_dir>/calibration/`; `resolve()` reads it back, so `plan`, `profiles show` and the auto values of
every profile predict with it. The files are reviewed like code.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sagellm.errors import InputError
from sagellm.planner import Calibration

HEADER = ("# sagellm calibrate: measured correction of the planner's step times for one model × instance type\n"
          "# × container (multipliers on the predicted decode floor, per-sequence cost and prefill). Review it\n"
          "# like code; `sagellm plan` and `sagellm profiles show` use it and say so.\n")


class FittedRun(BaseModel):
    """One bench run a calibration was fitted on."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    results: str  # path of its results.json, as given
    started_at: str
    target: str
    levels: int


class CalibrationFile(BaseModel):
    """The reviewable calibration file."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    model: str
    instance_type: str
    container: str
    container_version: str | None = Field(description="the pinned image version (the engine's pinned version by default)")
    generation: str
    decode_floor: float = Field(gt=0)
    decode_per_sequence: float = Field(gt=0)
    prefill: float = Field(gt=0)
    runs: list[FittedRun]
    error_pct_before: dict[str, float]  # mean absolute error of the uncorrected prediction, per metric
    error_pct_after: dict[str, float]
    sagellm_version: str


def calibration_dir(profiles_dir: Path | None) -> Path:
    """Where calibrations live: <profiles_dir>/calibration (./profiles by default, like models.yaml)."""
    return (profiles_dir or Path("profiles")) / "calibration"


def calibration_path(profiles_dir: Path | None, model_id: str, instance_type: str, container: str,
                     version: str | None) -> Path:
    """One file per model × instance type × container (kind and pinned version)."""
    name = "__".join((model_id.replace("/", "--"), instance_type, f"{container}-{version or 'latest'}"))
    return calibration_dir(profiles_dir) / f"{re.sub(r'[^A-Za-z0-9._-]', '_', name)}.yaml"


def load_calibration(profiles_dir: Path | None, model_id: str, instance_type: str, container: str,
                     version: str | None) -> Calibration | None:
    """The stored calibration for this key, or None; InputError naming the file and field when it is bad."""
    path = calibration_path(profiles_dir, model_id, instance_type, container, version)
    if not path.is_file():
        return None
    try:
        data = CalibrationFile.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not valid YAML ({str(exc).splitlines()[0]}); fix it or delete the file "
                         "and run `sagellm calibrate` again") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise InputError(f"{path}: {field}: {first['msg']}; fix it or delete the file and run "
                         "`sagellm calibrate` again") from None
    return Calibration(data.decode_floor, data.decode_per_sequence, data.prefill,
                       source=f"{len(data.runs)} run(s), {path}")


def save_calibration(path: Path, data: CalibrationFile) -> None:
    """Write the file (creating the folder), comments first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    body = yaml.safe_dump(data.model_dump(), sort_keys=False, allow_unicode=True)
    path.write_text(HEADER + body, encoding="utf-8")
