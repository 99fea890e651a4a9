"""One account and one region, resolved before anything is made: where the region comes from, what is checked
(credentials, the account by STS, the CDK bootstrap stack) and the one line each failure is."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from sagellm.aws import account as accounts
from sagellm.aws.account import choose_region, configured_region, resolve_account
from sagellm.aws.local import LocalAws
from sagellm.errors import ExitStatus, InputError, TargetError

BOOTSTRAP = json.dumps({"Resources": {"Bucket": {"Type": "AWS::S3::Bucket"}}})


@pytest.fixture
def no_aws_setup(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An environment with no AWS settings at all (botocore reads its files and switches from os.environ);
    returns the config file path a test may write a profile into."""
    for key in list(os.environ):
        if key.startswith("AWS_"):
            monkeypatch.delenv(key)
    config = tmp_path / "config"
    config.write_text("")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance-metadata lookups
    return config


@pytest.fixture
def aws(server: LocalAws) -> LocalAws:
    server.reset()
    return server


def test_the_flag_wins_then_the_environment_then_the_profile_then_us_east_1(
        no_aws_setup: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert choose_region(None) == ("us-east-1", ("the default (no AWS_REGION, AWS_DEFAULT_REGION or profile region "
                                                "set)"))
    no_aws_setup.write_text("[profile ops]\nregion = ap-south-1\n")
    monkeypatch.setenv("AWS_PROFILE", "ops")
    assert choose_region(None) == ("ap-south-1", "the AWS profile 'ops'")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-central-1")
    assert choose_region(None) == ("eu-central-1", "AWS_DEFAULT_REGION")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    assert configured_region() == ("eu-west-1", "AWS_REGION")
    assert choose_region("us-west-2") == ("us-west-2", "--region")


def test_no_credentials_is_one_line_of_bad_input_and_no_call(no_aws_setup: Path) -> None:
    with pytest.raises(InputError) as raised:
        resolve_account("us-east-1", bootstrap=True)

    [line] = raised.value.messages
    assert line.startswith("AWS credentials: none found") and line.endswith("nothing was deployed")
    assert raised.value.exit_status == ExitStatus.BAD_INPUT


@pytest.mark.slow  # the module's local AWS starts in seconds
def test_the_account_comes_from_sts_and_its_environment_pins_the_region(aws: LocalAws) -> None:
    env = aws.env({}) | {"AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "eu-west-1"}
    aws.client("cloudformation").create_stack(StackName="CDKToolkit", TemplateBody=BOOTSTRAP)

    account = resolve_account("us-east-1", env, bootstrap=True)

    assert (account.id, account.region) == ("123456789012", "us-east-1")  # moto's account
    assert (account.env["AWS_REGION"], account.env["AWS_DEFAULT_REGION"]) == ("us-east-1", "us-east-1")
    assert account.client("cloudformation").meta.region_name == "us-east-1"
    assert env["AWS_REGION"] == "eu-west-1"  # the caller's environment is left as it was


@pytest.mark.slow  # the module's local AWS starts in seconds
def test_a_region_without_the_cdk_bootstrap_stack_is_refused_with_the_command(aws: LocalAws) -> None:
    aws.client("cloudformation").create_stack(StackName="CDKToolkit", TemplateBody=BOOTSTRAP)  # us-east-1 only

    with pytest.raises(InputError) as raised:
        resolve_account("eu-west-1", aws.env({}), bootstrap=True)

    assert raised.value.messages == [
        ("--region eu-west-1: account 123456789012 is not bootstrapped for the CDK there (no CDKToolkit stack); run "
        "`sagellm cdk bootstrap aws://123456789012/eu-west-1` once, then run again; nothing was deployed")]
    assert resolve_account("eu-west-1", aws.env({}), bootstrap=False).region == "eu-west-1"  # an endpoint needs none


@pytest.mark.slow  # the module's local AWS starts in seconds
def test_an_unreachable_sts_is_an_infrastructure_failure(aws: LocalAws) -> None:
    env = aws.env({}) | {"AWS_ENDPOINT_URL": "http://127.0.0.1:9"}  # the discard port: nothing listens

    with pytest.raises(TargetError, match=r"^AWS STS in us-east-1 could not be reached .*nothing was deployed$"):
        resolve_account("us-east-1", env, bootstrap=False)


@pytest.mark.parametrize(("code", "expected", "status"), [
    ("ExpiredToken", "AWS credentials: expired (ExpiredToken); renew them", ExitStatus.BAD_INPUT),
    ("InvalidClientTokenId", "AWS credentials: refused by STS in us-east-1 (InvalidClientTokenId: no such key)",
     ExitStatus.BAD_INPUT),
    ("InternalFailure", "AWS STS in us-east-1: An error occurred (InternalFailure)", ExitStatus.TARGET_FAILED),
])
def test_sts_refusals_say_whose_fault_it_is(code: str, expected: str, status: ExitStatus) -> None:
    error = ClientError({"Error": {"Code": code, "Message": "no such key"}}, "GetCallerIdentity")

    refused = accounts._refused(error, "us-east-1")

    assert str(refused).startswith(expected) and str(refused).endswith("nothing was deployed")
    assert refused.exit_status == status


def test_sessions_parse_each_service_model_once_per_process_and_keep_their_own_settings() -> None:
    env = {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"}
    first, second = accounts.session_of(env, "eu-west-1"), accounts.session_of(env, "us-west-2")
    one = first._session.get_component("data_loader")
    assert second._session.get_component("data_loader") is one
    first.client("sagemaker", endpoint_url="http://127.0.0.1:9")
    cached = len(one._cache)
    second.client("sagemaker", endpoint_url="http://127.0.0.1:9")
    assert len(one._cache) == cached  # the second client read nothing again
    assert (first.region_name, second.region_name) == ("eu-west-1", "us-west-2")
    assert len(one.search_paths) == len(set(one.search_paths))  # boto3's data folder once, however many sessions
