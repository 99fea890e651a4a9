"""Finding, reading and merging profile YAML: shipped standard profiles plus a team's own folder."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from sagellm.errors import InputError
from sagellm.profiles.schema import Profile
from sagellm.profiles.tokens import redact, token_errors

STANDARD = ("min-latency", "max-throughput", "min-cost", "replicas", "autoscale")


@dataclass(frozen=True)
class Source:
    """One profile file as read: its raw mapping and the line of every key."""

    path: str
    data: dict[str, Any]
    lines: dict[tuple[str, ...], int]


def _walk(node: yaml.Node, path: tuple[str, ...], lines: dict[tuple[str, ...], int]) -> Any:
    """Turn a composed YAML node into Python values, recording each mapping key's line."""
    if isinstance(node, yaml.MappingNode):
        out = {}
        for key_node, value_node in node.value:
            key = str(key_node.value)
            lines[path + (key,)] = key_node.start_mark.line + 1
            out[key] = _walk(value_node, path + (key,), lines)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_walk(v, path + (str(i),), lines) for i, v in enumerate(node.value)]
    return yaml.safe_load(yaml.serialize(node))


def read_source(path: str, text: str) -> Source:
    """Parse one YAML document, keeping line numbers for error messages."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else path
        raise InputError(f"{where}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    lines: dict[tuple[str, ...], int] = {}
    data = _walk(node, (), lines) if node is not None else {}
    if not isinstance(data, dict):
        raise InputError(f"{path}: a profile must be a YAML mapping (name: ..., serving: ...)")
    return Source(path, data, lines)


def standard_sources() -> dict[str, Source]:
    """The profiles shipped inside the package."""
    folder = resources.files("sagellm.profiles").joinpath("standard")
    out = {}
    for name in STANDARD:
        src = read_source(f"<standard>/{name}.yaml", folder.joinpath(f"{name}.yaml").read_text())
        out[src.data.get("name", name)] = src
    return out


def team_sources(profiles_dir: Path | None) -> dict[str, Source]:
    """A team's own profiles: every *.yaml / *.yml in the folder (default ./profiles if present)."""
    folder = profiles_dir if profiles_dir is not None else Path("profiles")
    if profiles_dir is not None and not folder.is_dir():
        raise InputError(f"profiles_dir: {folder} is not a directory (give the folder holding your profile YAML)")
    if not folder.is_dir():
        return {}
    out = {}
    for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
        if path.stem == "models":
            continue  # the folder's model catalog (architectures), not a profile
        src = read_source(str(path), path.read_text())
        name = src.data.get("name", path.stem)
        out[str(name)] = src
    return out


def all_sources(profiles_dir: Path | None = None) -> dict[str, Source]:
    """Standard profiles overlaid by the team's (a team file may redefine a standard name)."""
    return {**standard_sources(), **team_sources(profiles_dir)}


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge mappings: the child's keys win, nested mappings merge."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _line(src: Source, loc: tuple[Any, ...]) -> str:
    """`file:line` for a pydantic error location, as close as the file says."""
    path = tuple(str(p) for p in loc)
    while path and path not in src.lines:
        path = path[:-1]
    return f"{src.path}:{src.lines[path]}" if path else src.path


def _check_tokens(src: Source) -> list[str]:
    """Hugging Face tokens anywhere in a profile file (the one check `profiles.tokens` defines)."""
    return token_errors(src.data, lambda loc: f"{_line(src, loc)}: {'.'.join(loc) or '(top level)'}")


def _chain(name: str, sources: dict[str, Source]) -> list[Source]:
    """The profile and its ancestors, child first; a team file may extend the standard profile it redefines."""
    chain: list[Source] = []
    current: str | None = name
    while current is not None:
        src = sources.get(current)
        if chain and chain[-1].data.get("name", current) == current and chain[-1].data.get("extends") == current:
            # `name: max-throughput` + `extends: max-throughput`: a team's variant of a standard profile.
            src = standard_sources().get(current, src)
        if src is None:
            close = difflib.get_close_matches(current, list(sources), n=3, cutoff=0.5)
            hint = f"did you mean {', '.join(close)}?" if close else f"known: {', '.join(sorted(sources))}"
            where = f"{_line(chain[-1], ('extends',))}: extends" if chain else "profile"
            raise InputError(f"{where}: unknown profile {current!r}: {hint}")
        if src in chain:
            names = [str(s.data.get("name", "?")) for s in chain] + [current]
            raise InputError(f"{_line(chain[-1], ('extends',))}: extends: cycle {' → '.join(names)}; "
                             "make one of them extend a standard profile")
        chain.append(src)
        parent = src.data.get("extends")
        current = str(parent) if parent is not None else None
    return chain


def _schema_errors(exc: ValidationError, chain: list[Source]) -> list[str]:
    """One line per bad field: file:line, dotted path, the value, what is wrong."""
    grouped: dict[tuple[str, ...], list[Any]] = {}
    for err in exc.errors():
        loc = tuple(str(p) for p in err["loc"])
        # pydantic appends union branch tags (`int`, `literal['auto']`) that are not keys of the file.
        while err["type"] != "missing" and len(loc) > 1 and not any(_has_path(s.data, loc) for s in chain):
            loc = loc[:-1]
        grouped.setdefault(loc, []).append(err)
    lines = []
    for loc, errs in grouped.items():
        owner = next((s for s in chain if _has_path(s.data, loc)), chain[0])
        err = errs[0]
        dotted = ".".join(loc)
        if err["type"] == "extra_forbidden":
            lines.append(f"{_line(owner, loc)}: {dotted}: unknown key (remove it or check its spelling)")
            continue
        if err["type"] == "missing":
            lines.append(f"{_line(owner, loc)}: {dotted}: required (add it)")
            continue
        value = "" if isinstance(err["input"], dict) else f" {err['input']!r}:"
        if any(e["type"] == "literal_error" and "'auto'" in e["msg"] for e in errs) and len(errs) > 1:
            msg = "expected a number ≥ 1 or 'auto'"
        else:
            msg = "; ".join(dict.fromkeys(e["msg"] for e in errs))
        lines.append(f"{_line(owner, loc)}: {dotted}:{value} {msg}")
    return lines


def load_profile(name: str, sources: dict[str, Source]) -> Profile:
    """Build one profile, following `extends:` chains; every error of the profile is reported together."""
    chain = _chain(name, sources)
    errors = [e for src in chain for e in _check_tokens(src)]
    merged: dict[str, Any] = {}
    for src in reversed(chain):
        merged = _merge(merged, src.data)
    merged["name"] = name
    merged["extends"] = chain[0].data.get("extends")
    try:
        profile = Profile.model_validate(merged)
    except ValidationError as exc:
        errors.extend(redact(line) for line in _schema_errors(exc, chain))
    if errors:
        raise InputError(errors)
    return profile


def _has_path(data: Any, loc: tuple[Any, ...]) -> bool:
    for part in loc:
        if isinstance(data, dict) and str(part) in data:
            data = data[str(part)]
        elif isinstance(data, list) and isinstance(part, int) and part < len(data):
            data = data[part]
        else:
            return False
    return True
