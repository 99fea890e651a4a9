"""Typer's coercion of an option's value, built only when the value needs it.

Typer 0.29 (`typer/core.py` `_TyperParameter.process_value`, `typer/_coercion.py` `build_runtime_param`) coerces
every option through a pydantic TypeAdapter built for it on first use, the options left at their defaults included:
importing `typer._adapters` and building an adapter per option of `sagellm plan` was about 40 ms of its CPU. A value
that is already what the option declares (None, a default, a string for a `str` option) comes back unchanged from
that adapter, so here it passes through and the adapter is built only for the others (an `int` typed on the
command line, a path), which then coerce and report errors exactly as typer does. Where typer has no such hook
(other versions), nothing changes.
"""

from __future__ import annotations

from typing import Any

import typer.core

_PLAIN = (str, int, float)  # option types whose adapter returns a value of that very type unchanged


class DeferredCoercion:
    """One option's coercion: values that need none pass through; the others go to typer's own, built then."""

    def __init__(self, descriptor: Any, build: Any):
        self.descriptor = descriptor
        self._build = build
        self._built: Any = None

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        """The value as typer's coercion would return it."""
        if value is None:
            return () if param.multiple or param.nargs == -1 else None
        if self._unchanged(value):
            return value
        if self._built is None:
            self._built = self._build(self.descriptor)
        return self._built.coerce(value, param=param, ctx=ctx)

    def _unchanged(self, value: Any) -> bool:
        """Whether typer's adapter would return `value` as it is: a plain value of the option's own type (not a
        bool for an int), within its range, with no parser or file to open."""
        d, info = self.descriptor, self.descriptor.parameter_info
        if d.file_annotation is not None or info.parser is not None or d.annotation not in _PLAIN:
            return False
        if type(value) is not d.annotation:
            return False
        if d.annotation is str:
            return True
        low, high = getattr(info, "min", None), getattr(info, "max", None)
        return not getattr(info, "clamp", False) and (low is None or value >= low) and (high is None or value <= high)


def defer_typer_coercion() -> None:
    """Make typer build each option's coercion only when a value needs it (see the module's docstring)."""
    build = getattr(typer.core, "build_runtime_param", None)
    if build is None or getattr(build, "deferred", False):
        return

    def deferred(descriptor: Any) -> DeferredCoercion:
        return DeferredCoercion(descriptor, build)

    deferred.deferred = True  # type: ignore[attr-defined]
    typer.core.build_runtime_param = deferred  # type: ignore[attr-defined,assignment]
