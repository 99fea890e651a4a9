"""The one validation path: every check of a profile that needs no model.

`profiles validate` runs `profile_errors()` on each profile as written; `design()` (show, plan, bench, emulate,
cdk synth) runs the same function on the profile with its command-line overrides, before any model-dependent
check. A new check is a function `(profile, where) -> list[str]` added to CHECKS.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from typing import Any, get_args

from sagellm.catalog import find_instance
from sagellm.catalog.regions import check_region, endpoint_types, missing_types_errors, partition
from sagellm.engines import ENGINES, NEURON_ENGINES
from sagellm.errors import InputError
from sagellm.profiles.loader import Source, Where, read_profile
from sagellm.profiles.schema import Profile, Quantization

Check = Callable[[Profile, Callable[[str], str]], list[str]]

# A profile name becomes part of CloudFormation stack names (`sagellm-<profile>-<model>`, `sagellm-bench-<profile>-…`):
# CreateStack's StackName holds only ASCII letters, digits and hyphens, at most 128 characters.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]*$")
NAME_MAX = 64  # leaves room for the prefixes and the model in the stack name
# AWS region names: us-east-1, eu-central-2, us-gov-west-1, cn-north-1, …
REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")
# SageMaker ContainerDefinition.Environment: at most 100 variables; keys [a-zA-Z_][a-zA-Z0-9_]*, values ≤ 1024.
ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
ENV_MAX, ENV_VALUE_MAX = 100, 1024
# SageMaker allows 50 tags per resource; sagellm adds sagellm:profile, :model, :version (and :bench-run).
TAGS_MAX = 50 - 4
TAG_CHARS = set(" _.:/=+-@")

# The profile field behind each setting the plan owns (an engine's Variable.sets names the setting; the
# engine says under which names its server reads it).
MODEL = "the model you deploy (--model, -c model)"
PROFILE_FIELDS = {
    "model_id": MODEL,
    "tensor_parallel": "serving.tensor_parallel",
    "quantization": "serving.quantization",
    "max_input_tokens": "serving.max_input_tokens",
    "max_total_tokens": "serving.max_total_tokens",
    "max_batch_prefill_tokens": "serving.max_batch_prefill_tokens",
    "max_batch_size": "serving.max_batch_size",
    "max_concurrent_requests": "serving.max_concurrent_requests",
}


def _name(profile: Profile, where: Callable[[str], str]) -> list[str]:
    """The name must fit in a CloudFormation stack name."""
    name = profile.name
    if NAME.match(name) and len(name) <= NAME_MAX:
        return []
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    suggestion = re.sub(r"[^A-Za-z0-9]+", "-", ascii_name).strip("-")[:NAME_MAX] or "my-profile"
    return [(f"{where('name')}: {name!r} cannot be part of a CloudFormation stack name: use ASCII letters, digits "
            f"and hyphens, at most {NAME_MAX} characters (e.g. {suggestion!r})")]


def _environment(profile: Profile, where: Callable[[str], str]) -> list[str]:
    """SageMaker's limits, and one name per server setting: no alias beside it, none beside a profile field."""
    env = profile.serving.environment
    errors = []
    for key, value in env.items():
        if not ENV_KEY.match(key):
            errors.append(f"{where(f'serving.environment.{key}')}: not a valid variable name (SageMaker takes "
                          "letters, digits and underscores, not starting with a digit)")
        elif len(value) > ENV_VALUE_MAX:
            errors.append(f"{where(f'serving.environment.{key}')}: {len(value)} characters; SageMaker takes at "
                          f"most {ENV_VALUE_MAX} per value")
    variables = ENGINES[profile.container.kind].variables
    for variable in variables:
        setting, field = variable.setting, PROFILE_FIELDS[variable.sets] if variable.sets else None
        given = [n for n in variable.names if n in env]
        if not given:
            continue
        place = f"{where(f'serving.environment.{given[0]}')}: {env[given[0]]!r}"
        place += "".join(f" (and {n}: {env[n]!r})" for n in given[1:])
        if field is not None:
            fix = f"remove {'it' if len(given) == 1 else 'them'}"
            fix += "" if field == MODEL else f" and set {field}" + (f": {env[given[0]]}" if len(given) == 1 else "")
            errors.append(f"{place}: the plan sets the server's {setting} from {field}; {fix}")
        elif len({env[n] for n in given}) > 1:
            errors.append(f"{place}: these disagree, and both set the server's {setting} (only one wins); "
                          "keep one of them")
    owned = sum(1 for variable in variables if variable.sets)
    if len(env) + owned > ENV_MAX:
        errors.append(f"{where('serving.environment')}: {len(env)} variables; SageMaker takes {ENV_MAX} per "
                      f"container and the plan sets {owned}: keep at most {ENV_MAX - owned}")
    return errors


def _tags(profile: Profile, where: Callable[[str], str]) -> list[str]:
    """SageMaker's tag limits (CreateEndpoint Tags: key 1–128, value ≤ 256, no aws: prefix)."""
    errors = []
    if len(profile.tags) > TAGS_MAX:
        errors.append(f"{where('tags')}: {len(profile.tags)} tags; SageMaker takes 50 per resource and sagellm adds "
                      f"4: keep at most {TAGS_MAX}")
    for key, value in profile.tags.items():
        if key.lower().startswith("aws:"):
            errors.append(f"{where(f'tags.{key}')}: the aws: prefix is reserved for AWS; rename the key")
        elif not 1 <= len(key) <= 128 or len(value) > 256 or any(
                not (ch.isalnum() or ch in TAG_CHARS) for ch in key + value):
            errors.append(f"{where(f'tags.{key}')}: {value!r} is not a valid tag: keys of 1–128 and values of up to "
                          "256 letters, digits, spaces and _.:/=+-@")
    return errors


def cap_errors(max_input: int, max_total: int, prefill: int, where: Callable[[str], str],
               chunked: bool = False) -> list[str]:
    """Token caps that contradict each other, whatever the model (also checked by design on resolved values).

    `chunked`: the server splits long prompts over several prefill passes (TGI 3 by default, vLLM), so the
    prefill budget may be smaller than a prompt.
    """
    errors = []
    if max_total <= max_input:
        errors.append(f"{where('max_total_tokens')}: {max_total} must exceed max_input_tokens ({max_input}); "
                      f"set it to at least {max_input + 1} (input + the longest generation)")
    if prefill < max_input and not chunked:
        errors.append(f"{where('max_batch_prefill_tokens')}: {prefill} is below max_input_tokens ({max_input}); "
                      f"a full prompt could never be prefilled — set it to at least {max_input}")
    return errors


def _token_caps(profile: Profile, where: Callable[[str], str]) -> list[str]:
    """Pinned token caps against each other (as the pinned server reads them)."""
    s = profile.serving
    max_input, max_total = s.max_input_tokens, s.max_total_tokens
    if max_input == "auto" or max_total == "auto":
        return []
    prefill = s.max_batch_prefill_tokens if s.max_batch_prefill_tokens != "auto" else max_input
    engine = ENGINES[profile.container.kind]
    return cap_errors(max_input, max_total, prefill, lambda f: where(f"serving.{f}"),
                      engine.chunks_prefill(profile.container.version, s.max_batch_size))


def _container(profile: Profile, where: Callable[[str], str]) -> list[str]:
    """An exact, modelled container version; an environment of variables that server reads."""
    engine = ENGINES[profile.container.kind]
    version = profile.container.version or engine.pinned
    try:
        errors = engine.version_errors(version, where("container.version")) if profile.container.version else []
        if not errors and profile.container.image_pin is not None:
            errors = _pin_errors(profile.container.kind, version, profile.container.image_pin,
                                 where("container.image_pin"))
    except InputError as exc:  # the SDK's image tables are missing
        return exc.messages
    named = {k: v for k, v in profile.serving.environment.items() if ENV_KEY.match(k)}  # bad names: _environment
    return errors + engine.environment_errors(version, named, lambda name: where(f"serving.environment.{name}"))


def _pin_errors(kind: str, version: str, pin: str, where: str) -> list[str]:
    """A pin of neither the kind's GPU image nor its Inferentia one (resolve checks the instance type's own)."""
    images = [engine for engine in (ENGINES[kind], NEURON_ENGINES.get(kind)) if engine is not None]
    found = [engine.pin_errors(version, pin, where) for engine in images]
    return [] if [] in found else found[0]


def quantization_errors(profile: Profile, where: Callable[[str], str]) -> list[str]:
    """A quantization the engine's server does not take (its own list: Engine.quantizations), named with the
    engine and where it was chosen, and the quantizations of sagellm's it does take."""
    kind = profile.container.kind
    engine = ENGINES[kind]
    variable = next((v.names[0] for v in engine.variables if v.sets == "quantization"), "it has no quantization setting")
    takes = [q for q in get_args(Quantization) if q == "none" or q in engine.quantizations]
    asked = [("serving.quantization", profile.serving.quantization)] + [
        (f"components.extra_models.{i}.quantization", extra.quantization)
        for i, extra in enumerate(profile.components.extra_models)]
    version = profile.container.version or engine.pinned
    return [f"{where(path)}: {quant!r} is not a quantization {engine.label} {version} takes "
            f"({where('container.kind')}: {kind}); of sagellm's it takes {', '.join(takes)} ({variable}): use one "
            "of those, or another engine (docs/containers.md)"
            for path, quant in asked if quant != "none" and quant not in engine.quantizations]


def _instance_type(profile: Profile, where: Callable[[str], str]) -> list[str]:
    """A pinned instance type the catalog knows (with near names when not)."""
    if profile.instance_type == "auto":
        return []
    try:
        find_instance(profile.instance_type, where("instance_type"))
    except InputError as exc:
        return exc.messages
    return []


def _endpoint_kind(profile: Profile, where: Callable[[str], str]) -> list[str]:
    """Several copies and extra models exist only on inference-component endpoints."""
    if profile.endpoint_kind == "inference-component":
        return []
    errors = []
    if profile.components.extra_models:
        errors.append(f"{where('components.extra_models')}: extra models need endpoint_kind: inference-component")
    if profile.components.copies not in ("auto", 1):
        errors.append(f"{where('components.copies')}: {profile.components.copies} copies need endpoint_kind: "
                      "inference-component (use the replicas profile)")
    return errors


def _autoscaling(profile: Profile, where: Callable[[str], str]) -> list[str]:
    """Capacity bounds in order, and an instance endpoint's initial count inside them."""
    a = profile.autoscaling
    if a is None:
        return []
    errors = []
    if a.max_capacity < a.min_capacity:
        errors.append(f"{where('autoscaling.max_capacity')}: {a.max_capacity} must be at least min_capacity "
                      f"({a.min_capacity})")
    if profile.endpoint_kind == "instance" and a.min_capacity == 0:
        errors.append(f"{where('autoscaling.min_capacity')}: 0 needs endpoint_kind: inference-component (only "
                      "inference components scale to zero; use the scale-to-zero profile)")
    count = profile.initial_instance_count
    # Inverted bounds hold no count: the error above is the one to fix.
    if profile.endpoint_kind == "instance" and a.min_capacity <= a.max_capacity and not (
            a.min_capacity <= count <= a.max_capacity):
        errors.append(f"{where('initial_instance_count')}: {count} must lie within autoscaling "
                      f"min_capacity..max_capacity ({a.min_capacity}..{a.max_capacity})")
    return errors


def _routing(profile: Profile, where: Callable[[str], str]) -> list[str]:
    """Prefix-aware routing with both of its settings (SageMaker requires them) and only then; KV-aware only on the
    vLLM image (botocore 1.44.8 ProductionVariantRoutingConfig: "KV_AWARE works only with supported containers,
    such as the SageMaker AI vLLM Deep Learning Container")."""
    r = profile.routing
    if r is None:
        return []
    prefix_aware = r.strategy == "prefix-aware"
    errors = [f"{where(f'routing.{field}')}: " + (f"prefix-aware routing needs it (SageMaker requires {name})"
                                                  if prefix_aware else "only with strategy: prefix-aware; remove it")
              for field, name in (("prefix_length", "PrefixLength"), ("concurrency_threshold", "ConcurrencyThreshold"))
              if (getattr(r, field) is None) == prefix_aware]
    if r.strategy == "kv-aware" and profile.container.kind != "vllm":
        errors.append(f"{where('routing.strategy')}: kv-aware works only with the vLLM image, not "
                      f"{profile.container.kind}; use prefix-aware, or container.kind: vllm")
    return errors


CHECKS: tuple[Check, ...] = (_name, _container, quantization_errors, _environment, _tags, _token_caps, _instance_type,
                             _endpoint_kind, _autoscaling, _routing)


# Marks an error about a value the schema refused (read_profile left it at its default): the schema's own
# error already names it, and a check of the default in its place would report what the file never said.
_REFUSED = "\0refused"


def profile_errors(profile: Profile, where: Callable[[str], str], refused: frozenset[str] = frozenset()) -> list[str]:
    """Every model-free check of a loaded profile, all errors together; none about the `refused` paths."""
    def marked(path: str) -> str:
        about = any(path == r or path.startswith(f"{r}.") for r in refused if r)
        return where(path) + (_REFUSED if about else "")

    return [error for check in CHECKS for error in check(profile, marked) if _REFUSED not in error]


def region_errors(region: str, endpoint_kind: str = "instance") -> list[str]:
    """A region that cannot be one, that no partition knows, or where CloudFormation lacks the endpoint's
    resources (a region without the image fails at the image lookup)."""
    if not REGION.match(region):
        return [f"region: {region!r} is not an AWS region name; use one such as us-east-1 or eu-west-1"]
    try:
        partition(region)
        check_region(region, "region")
    except InputError as exc:
        return exc.messages
    return missing_types_errors(region, endpoint_types(endpoint_kind == "inference-component"))

def validate_profile(name: str, sources: dict[str, Source]) -> list[str]:
    """`profiles validate` for one profile: read, merge `extends`, schema, then every check, all errors together."""
    try:
        read = read_profile(name, sources)
    except InputError as exc:  # a file that cannot be read, an unknown parent, a cycle: nothing to check
        return exc.messages
    if read.profile is None:
        return read.errors
    return read.errors + profile_errors(read.profile, Where(name, sources), read.refused)


def with_values(profile: Profile, values: dict[str, Any]) -> Profile:
    """The profile with command-line values (dotted path → value) in place of its own."""
    updates: dict[str, Any] = {}
    for path, value in values.items():
        section, _, field = path.rpartition(".")
        if section:
            updates.setdefault(section, {})[field] = value
        else:
            updates[field] = value
    nested = {k: getattr(profile, k).model_copy(update=v) for k, v in updates.items() if isinstance(v, dict)}
    return profile.model_copy(update={**{k: v for k, v in updates.items() if not isinstance(v, dict)}, **nested})
