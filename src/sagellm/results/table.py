"""results.csv: one row per level, the run's identity first (so several runs' CSVs concatenate), then one column
per field of the level (nested fields dotted: `ttft_ms.p50`)."""

from __future__ import annotations

import csv
import io
from typing import Any, get_args, get_origin

from pydantic import BaseModel

from sagellm.results.schema import Level, Results


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model a field holds (`Stats`, `Stats | None`), if any."""
    for candidate in (annotation, *get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def cells(model: type[BaseModel], value: BaseModel | None, prefix: str = "") -> dict[str, Any]:
    """A model's fields flattened to dotted columns, read from its type so an absent block keeps its columns."""
    out: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        item = getattr(value, name) if value is not None else None
        nested = _model_in(field.annotation)
        if isinstance(item, dict):  # keyed entries (errors by kind, server metrics by name): a column per key
            for key, v in item.items():
                out |= (cells(type(v), v, f"{prefix}{name}.{key}.") if isinstance(v, BaseModel)
                        else {f"{prefix}{name}.{key}": v})
        elif nested is not None and get_origin(field.annotation) is not dict:
            out |= cells(nested, item, f"{prefix}{name}.")
        else:
            out[prefix + name] = item
    return out


IDENTITY = ("run_id", "model", "profile", "instance_type", "instance_count", "target", "started_at")


def identity(results: Results) -> dict[str, Any]:
    """The columns that say which run a row comes from."""
    run = results.run
    return dict(zip(IDENTITY, (run.bench_run, run.model, run.profile, run.instance_type, run.instance_count,
                               run.target, run.started_at.isoformat(timespec="seconds")), strict=True))


def render_csv(results: Results) -> str:
    """Every measured level as a row, after the run's identity; the header is the union of their columns, in
    field order."""
    rows = [identity(results) | cells(type(level), level) for level in results.levels]
    header = list(dict.fromkeys(key for row in rows for key in row)) or [*IDENTITY, *cells(Level, None)]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=header, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({key: "" if value is None else value for key, value in row.items()})
    return buffer.getvalue()

