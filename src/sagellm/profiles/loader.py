"""Finding, reading and merging profile YAML: shipped standard profiles plus a team's own folder."""

from __future__ import annotations

import copy
import difflib
import types
import typing
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from sagellm.errors import InputError
from sagellm.profiles.schema import Architecture, Profile
from sagellm.profiles.tokens import redact, token_errors

STANDARD = ("min-latency", "max-throughput", "min-cost", "replicas", "autoscale", "scale-to-zero")
# Fields sagellm no longer takes, with why (docs/containers.md): named, not "did you mean" a near key.
RETIRED = {"max_batch_total_tokens": "no longer a profile field: TGI ≥ 1.4 ignores MAX_BATCH_TOTAL_TOKENS for "
                                     "flash-attention models (the KV budget is what is free after warm-up); remove "
                                     "it (serving.max_batch_size limits running sequences)"}
# A profile is a few dozen lines; a bigger file is the wrong file (and pure-Python YAML takes minutes on MBs).
MAX_FILE_BYTES = 1 << 20
MAX_VALUES = 100_000  # YAML aliases can expand a small file into billions of values
# libyaml's composer is ~10× faster than the pure-Python one; the nodes (and line marks) are the same.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Source:
    """One profile file as read: its raw mapping and the line of every key, or why it could not be read."""

    path: str
    data: dict[str, Any]
    lines: dict[tuple[str, ...], int]
    problem: str | None = None  # raised only where this profile is needed: one bad file breaks nothing else


class _Walk:
    """Turns a composed YAML node into Python values, recording each key's line and refusing duplicate keys."""

    def __init__(self, path: str):
        self.path = path
        self.lines: dict[tuple[str, ...], int] = {}
        self.count = 0
        self.scalars = yaml.constructor.SafeConstructor()

    def __call__(self, node: yaml.Node, at: tuple[str, ...]) -> Any:
        self.count += 1
        if self.count > MAX_VALUES:
            raise InputError(f"{self.path}: more than {MAX_VALUES} values (YAML aliases expanding?); a profile "
                             "is a few dozen lines — write the values out")
        if isinstance(node, yaml.MappingNode):
            out = {}
            for key_node, value_node in node.value:
                key = str(key_node.value)
                line = key_node.start_mark.line + 1
                if key in out:
                    dotted = ".".join((*at, key))
                    raise InputError(f"{self.path}:{line}: {dotted}: duplicate key (first at line "
                                     f"{self.lines[(*at, key)]}); keep one of them")
                self.lines[(*at, key)] = line
                out[key] = self(value_node, (*at, key))
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self(v, (*at, str(i))) for i, v in enumerate(node.value)]
        return self.scalars.construct_object(node)


def read_source(path: str, text: str) -> Source:
    """Parse one YAML document, keeping line numbers for error messages."""
    walk = _Walk(path)
    try:
        node = yaml.compose(text, Loader=_LOADER)
        data = walk(node, ()) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else path
        problem, context = getattr(exc, "problem", None), getattr(exc, "context", None)
        detail = f"{problem} ({context})" if problem and context else problem or str(exc)
        raise InputError(f"{where}: not valid YAML: {detail}") from None
    if node is None:
        raise InputError(f"{path}: empty; a profile needs at least `name: <name>` and `extends: <profile>` "
                         "(e.g. extends: max-throughput)")
    if not isinstance(data, dict):
        raise InputError(f"{path}: a profile must be a YAML mapping (name: ..., serving: ...), not "
                         f"{type(data).__name__} {_short(data)}")
    return Source(path, data, walk.lines)


def read_file(path: Path) -> Source:
    """Read a YAML file: UTF-8 text under the size limit, not empty, no duplicate keys."""
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise InputError(f"{path}: {size} bytes is over the {MAX_FILE_BYTES}-byte (1 MiB) limit for a profile "
                             "file; a profile is a few dozen lines — is this the right file?")
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read it ({exc.strerror}); check the path and its permissions") from None
    try:
        if b"\0" in raw:
            raise UnicodeDecodeError("utf-8", raw, raw.index(b"\0"), raw.index(b"\0") + 1, "NUL byte")
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); a profile "
                         "is YAML saved as UTF-8 — is this the right file?") from None
    return read_source(str(path), text)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def standard_sources() -> dict[str, Source]:
    """The profiles shipped inside the package (a copy of the mapping: the caller's to change)."""
    return dict(_standard_sources())


@cache
def _standard_sources() -> dict[str, Source]:
    """The shipped profiles, parsed once per process: they are package data, and `recommend` designs hundreds of
    configs (parsing them again for each was a tenth of its time)."""
    folder = resources.files("sagellm.profiles").joinpath("standard")
    out = {}
    for name in STANDARD:
        src = read_source(f"<standard>/{name}.yaml", folder.joinpath(f"{name}.yaml").read_text())
        out[src.data.get("name", name)] = src
    return out


def team_sources(profiles_dir: Path | None) -> dict[str, Source]:
    """A team's own profiles: every *.yaml / *.yml in the folder (default ./profiles if present).

    A file that cannot be read, or a name defined twice, becomes a Source carrying the problem: commands
    that need that profile fail on it, the others run.
    """
    folder = profiles_dir if profiles_dir is not None else Path("profiles")
    if profiles_dir is not None and not folder.is_dir():
        raise InputError(f"profiles_dir: {folder} is not a directory (give the folder holding your profile YAML)")
    if not folder.is_dir():
        return {}
    out: dict[str, Source] = {}
    broken: list[tuple[Path, str]] = []
    for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
        if path.stem == "models":
            continue  # the folder's model catalog (architectures), not a profile
        try:
            src = read_file(path)
        except InputError as exc:
            broken.append((path, str(exc)))
            continue
        name = str(src.data.get("name", path.stem))
        first = out.get(name)
        if first is not None and first.problem is not None:
            continue  # already refused as defined twice
        if first is not None:
            src = Source(src.path, {}, {}, problem=duplicate_name(src, first, name))
        out[name] = src
    for path, problem in broken:
        # The file's own name is the best guess of the profile it holds.
        out[path.stem if path.stem not in out else str(path)] = Source(str(path), {}, {}, problem=problem)
    return out


def duplicate_name(src: Source, first: Source, name: str) -> str:
    """The error for a profile name defined in two files, naming both."""
    return (f"{_line(src, ('name',))}: name: {name!r} is also defined in {_line(first, ('name',))}; rename one of "
            "them (a profile name is defined once)")


def all_sources(profiles_dir: Path | None = None) -> dict[str, Source]:
    """Standard profiles overlaid by the team's (a team file may redefine a standard name)."""
    return {**standard_sources(), **team_sources(profiles_dir)}


def local_models(profiles_dir: Path | None) -> dict[str, Architecture]:
    """Architectures a team keeps for models the catalog lacks: <profiles_dir>/models.yaml."""
    path = (profiles_dir or Path("profiles")) / "models.yaml"
    if not path.is_file():
        return {}
    src = read_file(path)
    out, errors = {}, []
    for model_id, entry in src.data.items():
        try:
            out[model_id] = Architecture.model_validate(entry)
        except ValidationError as exc:
            errors.extend(_schema_errors(exc, [src], root=Architecture, prefix=(model_id,)))
    if errors:
        raise InputError(errors)
    return out


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
        if src.problem is not None:
            raise InputError(src.problem)
        if src in chain:
            names = [str(s.data.get("name", "?")) for s in chain] + [current]
            raise InputError(f"{_line(chain[-1], ('extends',))}: extends: cycle {' → '.join(names)}; "
                             "make one of them extend a standard profile")
        chain.append(src)
        parent = src.data.get("extends")
        current = str(parent) if parent is not None else None
    return chain


class Where:
    """Names where a value came from: the command-line option that set it, or the profile file and line."""

    def __init__(self, name: str, sources: dict[str, Source], flags: dict[str, str] | None = None):
        self.chain, self.flags = _chain(name, sources), flags or {}

    def __call__(self, path: str) -> str:
        if path in self.flags:
            return self.flags[path]
        keys = tuple(path.split("."))
        owner = _owner(self.chain, keys)
        line = owner.lines.get(keys)
        return f"{owner.path}:{line}: {path}" if line else f"{owner.path}: {path}"


def _fields(root: type[BaseModel], loc: tuple[str, ...]) -> list[str]:
    """The field names a schema allows at a location (for near-miss suggestions)."""
    model: type[BaseModel] | None = root
    for part in loc:
        field = model.model_fields.get(part) if model is not None else None
        if field is None:
            if part.isdigit():
                continue  # a list index: same model
            return []
        model = _model_in(field.annotation)
    return list(model.model_fields) if model is not None else []


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside `X | None`, `tuple[X, ...]` and the like."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, tuple, list):
        return next((m for a in typing.get_args(annotation) if (m := _model_in(a)) is not None), None)
    return None


_RANGE = {"greater_than_equal": "≥ {ge}", "greater_than": "> {gt}", "less_than_equal": "≤ {le}", "less_than": "< {lt}"}


def _schema_errors(exc: ValidationError, chain: list[Source], root: type[BaseModel] = Profile,
                   prefix: tuple[str, ...] = ()) -> list[str]:
    """One line per bad field: file:line, dotted path, the value, what is wrong and the fix."""
    return [_missing_line(loc[:-1], errs, chain) if errs[0]["type"] == "missing"
            else _field_line(loc, errs, chain, root, prefix)
            for loc, errs in _by_field(exc, chain, prefix).items()]


def _by_field(exc: ValidationError, chain: list[Source], prefix: tuple[str, ...]) -> dict[tuple[str, ...], list[Any]]:
    """The errors grouped by the file's key they are about (every missing field of one mapping together)."""
    grouped: dict[tuple[str, ...], list[Any]] = {}
    for err in exc.errors():
        loc = (*prefix, *(str(p) for p in err["loc"]))
        if err["type"] == "missing":
            loc = (*loc[:-1], "")  # every missing field of one mapping goes in one line
        # pydantic appends union branch tags (`int`, `literal['auto']`) that are not keys of the file.
        while err["type"] != "missing" and len(loc) > 1 and not any(_has_path(s.data, loc) for s in chain):
            loc = loc[:-1]
        grouped.setdefault(loc, []).append(err)
    return grouped


def _owner(chain: list[Source], loc: tuple[str, ...]) -> Source:
    """The file of the chain that holds `loc` (else the profile's own)."""
    return next((s for s in chain if _has_path(s.data, loc)), chain[0])


def _missing_line(loc: tuple[str, ...], errs: list[Any], chain: list[Source]) -> str:
    """The fields missing from the mapping at `loc`, in one line."""
    names = ", ".join(str(e["loc"][-1]) for e in errs)
    return (f"{_line(_owner(chain, loc), loc)}: {'.'.join(loc) or 'profile'}: missing {names} (add "
            f"{'it' if len(errs) == 1 else 'them'})")


def _field_line(loc: tuple[str, ...], errs: list[Any], chain: list[Source], root: type[BaseModel],
                prefix: tuple[str, ...]) -> str:
    """What is wrong with the key at `loc`: retired, unknown (with a near miss), or its value."""
    place = f"{_line(_owner(chain, loc), loc)}: {'.'.join(loc)}"
    err = errs[0]
    if err["type"] == "extra_forbidden" and loc[-1] in RETIRED:
        return f"{place}: {RETIRED[str(loc[-1])]}"
    if err["type"] == "extra_forbidden":
        close = difflib.get_close_matches(loc[-1], _fields(root, loc[len(prefix):-1]), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}?" if close else "remove it or check its spelling"
        return f"{place}: unknown key ({hint})"
    value = "" if isinstance(err["input"], dict) else f" {_short(err['input'])}:"
    return f"{place}:{value} {_value_problem(errs)}"


def _value_problem(errs: list[Any]) -> str:
    """A bad value's problem: the range it must be in, `auto` where allowed, a number to quote, else pydantic's."""
    err = errs[0]
    auto = any(e["type"] == "literal_error" and "'auto'" in e["msg"] for e in errs) and len(errs) > 1
    bound = next((e for e in errs if e["type"] in _RANGE), None)
    if bound is not None:
        need = _RANGE[bound["type"]].format(**bound["ctx"])
        return f"out of range; use a value {need}{' or auto' if auto else ''}"
    if auto:
        return "expected a whole number ≥ 1 or 'auto'"
    if err["type"] == "string_type" and isinstance(err["input"], int | float | bool):
        return f"{err['msg']}; quote it: \"{err['input']}\""
    return "; ".join(dict.fromkeys(e["msg"] for e in errs))


@dataclass(frozen=True)
class Read:
    """A profile as its files give it, with what the files got wrong: the checks that need a profile still run
    on it, so a profile's every error is reported together (a schema error does not hide a semantic one)."""

    profile: Profile | None  # every value the schema refused left at its default (None: not even then)
    errors: list[str]  # the files' own errors (schema, tokens), one line each
    refused: frozenset[str]  # the dotted paths left at their default: checks say nothing more about them


def read_profile(name: str, sources: dict[str, Source]) -> Read:
    """Build one profile, following `extends:` chains, keeping every error of its files."""
    chain = _chain(name, sources)
    errors = [e for src in chain for e in _check_tokens(src)]
    merged: dict[str, Any] = {}
    for src in reversed(chain):
        merged = _merge(merged, src.data)
    merged["name"] = name
    merged["extends"] = chain[0].data.get("extends")
    try:
        return Read(Profile.model_validate(merged), errors, frozenset())
    except ValidationError as exc:
        errors.extend(redact(line) for line in _schema_errors(exc, chain))
        merged = copy.deepcopy(merged)  # it shares its mappings with the files' (their line numbers read them)
        refused = frozenset(_drop(merged, loc) for loc in _by_field(exc, chain, ()))
    try:
        return Read(Profile.model_validate(merged), errors, refused)
    except ValidationError:
        return Read(None, errors, refused)


def load_profile(name: str, sources: dict[str, Source]) -> Profile:
    """Build one profile, following `extends:` chains; every error of its files is reported together."""
    read = read_profile(name, sources)
    if read.errors:
        raise InputError(read.errors)
    assert read.profile is not None  # no error: the schema took it
    return read.profile


def _drop(data: dict[str, Any], loc: tuple[str, ...]) -> str:
    """Remove the value at a schema error's location (a missing field's mapping, a whole list, the whole
    container: its version and image are its kind's), so the default stands in; returns the dotted path removed."""
    keys = [k for k in loc if k]
    if keys[:1] == ["container"]:
        keys = ["container"]
    at: Any = data
    for i, key in enumerate(keys):
        if not isinstance(at, dict) or key not in at:
            break  # removed with an earlier error's mapping
        if i == len(keys) - 1 or not isinstance(at[key], dict):
            del at[key]
            return ".".join(keys[:i + 1])
        at = at[key]
    return ".".join(keys)


def _has_path(data: Any, loc: tuple[Any, ...]) -> bool:
    for part in loc:
        if isinstance(data, dict) and str(part) in data:
            data = data[str(part)]
        elif isinstance(data, list) and str(part).isdigit() and int(part) < len(data):
            data = data[int(part)]
        else:
            return False
    return True
