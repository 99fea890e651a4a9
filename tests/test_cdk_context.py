"""CDK context keys for the app: every bad key in one line naming key, value and fix; good ones read as typed."""

from __future__ import annotations

from pathlib import Path

import pytest

from sagellm.cdk_context import read_context
from sagellm.engines import ENGINES
from sagellm.errors import InputError
from sagellm.planner import Payload
from sagellm.profiles import resolve


def read(**context: object):
    return read_context(context.get, context)


def problems(**context: object) -> list[str]:
    with pytest.raises(InputError) as exc:
        read(**context)
    return exc.value.messages


def test_reads_every_key_with_defaults() -> None:
    ctx = read(profile="max-throughput", model="meta-llama/Llama-2-7b-hf")
    assert (ctx.instance, ctx.region, ctx.profiles_dir, ctx.payload) == (None, "us-east-1", None, None)
    assert (ctx.stack_name, ctx.bootstrapless) == ("sagellm-max-throughput-llama-2-7b-hf", False)
    ctx = read(profile="p", model="m", instance="ml.g5.2xlarge", region="eu-west-1", profiles_dir="teams",
               input_tokens="512", output_tokens=64, stack_name="Chat-1", bootstrapless="true")
    assert (ctx.instance, ctx.region, ctx.profiles_dir) == ("ml.g5.2xlarge", "eu-west-1", Path("teams"))
    assert (ctx.payload, ctx.stack_name, ctx.bootstrapless) == (Payload(512, 64), "Chat-1", True)
    assert (ctx.engine, read(profile="p", model="m", engine="lmi").engine) == (None, "lmi")


def test_missing_profile_and_model_are_named_with_the_command_that_fixes_them() -> None:
    assert problems() == [
        ("profile: missing (cdk synth -c profile=<name> -c model=<Hugging Face id>; `sagellm profiles list` names "
         "the profiles)"),
        ("model: missing (cdk synth -c profile=<name> -c model=<Hugging Face id>; `sagellm profiles list` names "
         "the profiles)"),
    ]


@pytest.mark.parametrize(("context", "message"), [
    ({"input_tokens": "0"}, "input_tokens: '0' must be a whole number of tokens from 1 to 4294967295"),
    ({"output_tokens": "1.5"}, "output_tokens: '1.5' must be a whole number of tokens from 1 to 4294967295"),
    ({"output_tokens": True}, "output_tokens: True must be a whole number of tokens from 1 to 4294967295"),
    ({"stack_name": "1-chat"}, ("stack_name: '1-chat' is not a CloudFormation stack name: ASCII letters, digits "
                                "and hyphens, starting with a letter, at most 128 characters")),
    ({"stack_name": "s" * 129}, (f"stack_name: '{'s' * 129}' is not a CloudFormation stack name: ASCII letters, "
                                 "digits and hyphens, starting with a letter, at most 128 characters")),
    ({"bootstrapless": "maybe"}, "bootstrapless: 'maybe' must be true or false"),
    ({"instance": ["ml.g5.2xlarge"]}, "instance: ['ml.g5.2xlarge'] must be text (-c instance=<value>)"),
    ({"regoin": "eu-west-1"}, "regoin: unknown context key; did you mean region?"),
    ({"engine": "nope"}, f"engine: unknown engine 'nope' (known: {', '.join(ENGINES)})"),
], ids=["zero-tokens", "fractional-tokens", "boolean-tokens", "stack-name-digit", "stack-name-long",
        "bootstrapless", "list-instead-of-text", "near-miss-key", "unknown-engine"])
def test_a_bad_value_is_one_line_naming_the_key_the_value_and_the_fix(context: dict, message: str) -> None:
    assert problems(profile="max-throughput", model="llama2-7b", **context) == [message]


def test_other_context_keys_are_left_alone() -> None:
    ctx = read(profile="p", model="m", **{"cli-telemetry": False, "@aws-cdk/core:newStyleStackSynthesis": True})
    assert ctx.profile == "p"


def test_a_long_model_id_still_gives_a_valid_default_stack_name() -> None:
    ctx = read(profile="max-throughput", model="acme/" + "x" * 200)
    assert len(ctx.stack_name) == 128 and ctx.stack_name.startswith("sagellm-max-throughput-xxx")


def test_a_plan_file_is_read_as_the_plan_to_deploy(tmp_path: Path) -> None:
    plan = resolve("max-throughput", "llama2-7b", "ml.g5.2xlarge", profiles_dir=tmp_path)
    handed = tmp_path / "plan.json"
    handed.write_text(plan.model_dump_json(indent=2))
    ctx = read(plan=str(handed), stack_name="sagellm-bench-run-1")
    assert ctx.plan == plan
    assert (ctx.profile, ctx.model, ctx.instance, ctx.region) == (
        "max-throughput", "meta-llama/Llama-2-7b-hf", "ml.g5.2xlarge", "us-east-1")
    assert read(plan=str(handed)).stack_name == "sagellm-max-throughput-llama-2-7b-hf"


def test_a_plan_is_given_alone_and_must_be_a_readable_plan(tmp_path: Path) -> None:
    handed = tmp_path / "plan.json"
    handed.write_text(resolve("max-throughput", "llama2-7b", profiles_dir=tmp_path).model_dump_json())
    assert problems(plan=str(handed), profile="min-cost", instance="ml.g5.xlarge") == [
        "profile: not with plan (the plan already decides it)",
        "instance: not with plan (the plan already decides it)"]
    missing = tmp_path / "no-such-plan.json"
    assert problems(plan=str(missing)) == [f"plan: {missing}: cannot be read (No such file or directory)"]
    handed.write_text('{"profile": "max-throughput"}')
    [first, *_] = problems(plan=str(handed))
    assert first == f"plan: {handed}: region: Field required"


def test_model_s3_uri_is_read_as_an_s3_prefix_and_refused_otherwise() -> None:
    assert read(profile="replicas", model="m").model_s3_uri is None
    assert read(profile="replicas", model="m", model_s3_uri="s3://team-models/llama/").model_s3_uri == \
        "s3://team-models/llama/"
    assert problems(profile="replicas", model="m", model_s3_uri="s3://team-models/llama.tar.gz") == [
        "model_s3_uri: 's3://team-models/llama.tar.gz' is not an S3 prefix; give s3://<bucket>/<prefix>/ (ending in '/')"]
