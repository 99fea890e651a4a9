"""The CDK app's context keys, read and checked: one line per bad key, never a Python or JavaScript traceback."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sagellm.catalog.s3_weights import S3_PREFIX, S3_PREFIX_FORM
from sagellm.engines import engine_option
from sagellm.errors import InputError
from sagellm.planner import Payload
from sagellm.profiles.plan import DeploymentPlan
from sagellm.profiles.schema import U32_MAX
from sagellm.profiles.tokens import STORE_IT, token_errors

KEYS = ("plan", "profile", "model", "instance", "engine", "region", "profiles_dir", "input_tokens", "output_tokens",
        "stack_name", "bootstrapless", "hf_token_secret", "model_s3_uri", "bench_run", "bench_process")
# What a plan already decides: these keys resolve one, so they are not given beside it.
RESOLVING = ("profile", "model", "instance", "engine", "region", "profiles_dir", "input_tokens", "output_tokens",
             "hf_token_secret", "model_s3_uri")
# CloudFormation CreateStack StackName: ASCII letters, digits and hyphens, starting with a letter, ≤ 128.
STACK_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]*$")
STACK_NAME_MAX = 128


@dataclass(frozen=True)
class AppContext:
    """What `cdk synth -c key=value …` asked for: a plan, or the profile and model to resolve one from."""

    profile: str
    model: str  # the plan's primary model id, with a plan
    instance: str | None
    region: str
    profiles_dir: Path | None
    payload: Payload | None
    stack_name: str
    bootstrapless: bool
    hf_token_secret: str | None = None  # Secrets Manager name or ARN of the Hugging Face token
    engine: str | None = None  # a container kind in place of the profile's (sagellm.engines.ENGINES)
    plan: DeploymentPlan | None = None  # `-c plan=<plan.json>`: deployed as it is (the bench hands over its own)
    model_s3_uri: str | None = None  # the main model's weights staged in S3: no token, no Hub


def read_context(get: Callable[[str], Any], given: Iterable[str] = ()) -> AppContext:
    """Read and check every context key (`get` is `app.node.try_get_context`); all problems together."""
    errors: list[str] = []

    def text(key: str) -> str | None:
        value = get(key)
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            errors.append(f"{key}: {value!r} must be text (-c {key}=<value>)")
            return None
        return value

    errors += _unknown_keys(given)
    given_plan = text("plan")
    plan = _plan(given_plan, errors)
    profile, model = (plan.profile, plan.primary.model_id) if plan else (text("profile"), text("model"))
    errors += _source_errors(get, given_plan is not None)
    tokens = {key: _tokens(key, get(key), errors) for key in ("input_tokens", "output_tokens")}
    payload = None
    if any(v is not None for v in tokens.values()):
        payload = Payload(tokens["input_tokens"] or 256, tokens["output_tokens"] or 256)
    stack_name = text("stack_name")
    errors += _stack_name_errors(stack_name)
    bootstrapless = get("bootstrapless")
    if str(bootstrapless).lower() not in ("true", "false", "none"):
        errors.append(f"bootstrapless: {bootstrapless!r} must be true or false")
    instance, region, folder = text("instance"), text("region"), text("profiles_dir")
    engine = text("engine")
    try:
        engine_option(engine, "engine")
    except InputError as bad:
        errors += bad.messages
    secret, model_s3_uri = text("hf_token_secret"), text("model_s3_uri")
    errors += _weight_access_errors(get, secret, model_s3_uri)
    if errors:
        raise InputError(errors)
    assert profile is not None and model is not None
    slug = re.sub(r"[^a-z0-9]+", "-", model.split("/")[-1].lower()).strip("-")
    return AppContext(
        profile=profile, model=model, instance=plan.instance_type if plan else instance,
        region=plan.region if plan else region or "us-east-1",
        profiles_dir=Path(folder) if folder else None, payload=payload,
        stack_name=stack_name or f"sagellm-{profile}-{slug}"[:STACK_NAME_MAX].rstrip("-"),
        bootstrapless=str(bootstrapless).lower() == "true", hf_token_secret=secret, plan=plan,
        model_s3_uri=model_s3_uri, engine=engine,
    )


def _unknown_keys(given: Iterable[str]) -> list[str]:
    """A key close to a known one is a typo that would silently deploy the profile's default instead."""
    errors = []
    for key in given:
        close = difflib.get_close_matches(key, KEYS, n=1, cutoff=0.75)
        if key not in KEYS and close:
            errors.append(f"{key}: unknown context key; did you mean {close[0]}?")
    return errors


def _source_errors(get: Callable[[str], Any], with_plan: bool) -> list[str]:
    """What to deploy comes from a plan or from a profile and a model, never both."""
    if with_plan:
        return [f"{key}: not with plan (the plan already decides it)" for key in RESOLVING
                if get(key) not in (None, "")]
    return [f"{key}: missing (cdk synth -c profile=<name> -c model=<Hugging Face id>; `sagellm profiles "
            "list` names the profiles)" for key in ("profile", "model") if get(key) in (None, "")]


def _stack_name_errors(stack_name: str | None) -> list[str]:
    """The stack name CloudFormation would refuse."""
    if stack_name is not None and (not STACK_NAME.match(stack_name) or len(stack_name) > STACK_NAME_MAX):
        return [(f"stack_name: {stack_name!r} is not a CloudFormation stack name: ASCII letters, digits and "
                f"hyphens, starting with a letter, at most {STACK_NAME_MAX} characters")]
    return []


def _weight_access_errors(get: Callable[[str], Any], secret: str | None, model_s3_uri: str | None) -> list[str]:
    """How the weights are reached: a token's secret or an S3 prefix, never the token itself."""
    # A token itself is never context: cdk.out and cdk.context.json would keep it.
    errors = [f"{key}: a token is never passed as context (it would be written to cdk.out): {STORE_IT}"
              for key in ("hf_token", "HF_TOKEN") if get(key) is not None]
    errors += token_errors({"hf_token_secret": secret}, lambda loc: loc[-1]) if secret is not None else []
    if model_s3_uri is not None and not S3_PREFIX.match(model_s3_uri):
        errors.append(f"model_s3_uri: {model_s3_uri!r} is not an S3 prefix; give {S3_PREFIX_FORM}")
    return errors


def _plan(path: str | None, errors: list[str]) -> DeploymentPlan | None:
    """The DeploymentPlan in a plan.json (a bench writes the one it deploys to its output folder)."""
    if path is None:
        return None
    try:
        return DeploymentPlan.model_validate_json(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        errors.append(f"plan: {path}: cannot be read ({exc.strerror or exc})")
    except ValidationError as exc:
        errors += [f"plan: {path}: {'.'.join(map(str, e['loc'])) or 'the file'}: {e['msg']}" for e in exc.errors()]
    return None


def _tokens(key: str, value: Any, errors: list[str]) -> int | None:
    """A token count from context (text from `-c`, or a number from cdk.json)."""
    if value is None or value == "":
        return None
    try:
        if isinstance(value, bool) or isinstance(value, float) and not value.is_integer():
            raise ValueError
        tokens = int(value)
    except (TypeError, ValueError):
        tokens = 0
    if not 1 <= tokens <= U32_MAX:
        errors.append(f"{key}: {value!r} must be a whole number of tokens from 1 to {U32_MAX}")
        return None
    return tokens
