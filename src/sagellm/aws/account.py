"""The AWS account and region a run uses, resolved once before anything is made.

A bench against an account checks, before its first deploy, that credentials resolve, that STS names the account,
that the region is set and that the CDK bootstrap stack is there; then deploy (the CDK CLI), the load, the server
metrics, teardown and cleanup all take this one `Account`. Its environment pins the region (AWS_REGION and
AWS_DEFAULT_REGION), so a child process or a client made later cannot land in another region because the
caller's environment said nothing, or changed meanwhile.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import boto3
import botocore.session
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, ProfileNotFound

from sagellm.errors import InputError, TargetError

DEFAULT_REGION = "us-east-1"
# The stack `cdk bootstrap` creates (its default --toolkit-stack-name); `cdk deploy` needs it in the region.
TOOLKIT_STACK = "CDKToolkit"
# Throttling and transient errors are retried with backoff by botocore's standard mode; a bench at teardown,
# and a cleanup beside other benches, shares the account's CloudFormation rate with everything else.
RETRIES = Config(retries={"mode": "standard", "max_attempts": 10}, connect_timeout=10, read_timeout=60)
# The checks before a deploy answer in seconds: an unreachable AWS is said at once, not after a minute of backoff.
CHECKS = Config(retries={"mode": "standard", "max_attempts": 2}, connect_timeout=5, read_timeout=30)
# Error codes by which STS and the other services say the credentials themselves are wrong or out of date.
REFUSED_CREDENTIALS = {
    "ExpiredToken", "ExpiredTokenException", "RequestExpired", "InvalidClientTokenId", "UnrecognizedClientException",
    "SignatureDoesNotMatch", "InvalidAccessKeyId", "AuthFailure", "AccessDenied", "AccessDeniedException",
}
EXPIRED_CREDENTIALS = {"ExpiredToken", "ExpiredTokenException", "RequestExpired"}


def configured_region(env: Mapping[str, str] | None = None) -> tuple[str | None, str]:
    """The region the AWS configuration names (AWS_REGION, AWS_DEFAULT_REGION, then the profile's), and where it
    was read; (None, why not) when none is set."""
    env = os.environ if env is None else env
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        if env.get(name):
            return env[name], name
    profile = env.get("AWS_PROFILE") or "default"
    try:  # the shared config file's region for the profile, as the AWS CLI reads it
        region = session_of(env, region=None).region_name
    except (ProfileNotFound, BotoCoreError):
        region = None
    if region:
        return region, f"the AWS profile {profile!r}"
    return None, "no AWS_REGION, AWS_DEFAULT_REGION or profile region"


def choose_region(flag: str | None, env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The run's region and where it came from: --region, else the AWS configuration's, else us-east-1."""
    if flag:
        return flag, "--region"
    region, source = configured_region(env)
    return (region, source) if region else (DEFAULT_REGION, f"the default ({source} set)")


@dataclass(frozen=True)
class Account:
    """An AWS account and region, with the environment every call and the CDK CLI use (region pinned)."""

    id: str
    region: str
    env: Mapping[str, str] = field(repr=False)

    def session(self) -> boto3.session.Session:
        """A new session from the account's environment: credentials are read again (a renewed SSO or
        credential_process login is picked up)."""
        return session_of(self.env, region=self.region)

    def client(self, service: str, config: Config = RETRIES) -> Any:
        """A client for `service` in the account's region (AWS_ENDPOINT_URL[_SERVICE] honoured, throttling retried)."""
        return client_of(self.env, service, config)



def pinned_env(region: str, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`env` (default: os.environ) with the region set for every SDK that reads it (boto3, the CDK CLI's JS SDK)."""
    pinned = dict(os.environ if env is None else env)
    pinned["AWS_REGION"] = pinned["AWS_DEFAULT_REGION"] = region
    return pinned


def resolve_account(region: str, env: Mapping[str, str] | None = None, *, bootstrap: bool) -> Account:
    """The account the credentials belong to, in `region`, checked before anything is made: credentials
    resolve, STS names the account, and (`bootstrap`) the CDK bootstrap stack is there. Each failure is one line
    (InputError: exit 2 for the caller's set-up; TargetError: exit 3 when AWS cannot be reached)."""
    pinned = pinned_env(region, env)
    account = Account("", region, pinned)
    try:
        credentials = account.session().get_credentials()
    except (ProfileNotFound, BotoCoreError) as error:
        raise InputError(f"AWS credentials: {error}; fix the profile (AWS_PROFILE) and run again; nothing was "
                         "deployed") from None
    if credentials is None:
        raise InputError("AWS credentials: none found (no AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, SSO "
                         "login or instance role); configure them (e.g. `aws configure` or `aws sso login`) and run "
                         "again; nothing was deployed")
    try:
        account_id = str(account.client("sts", CHECKS).get_caller_identity()["Account"])
    except ClientError as error:
        raise _refused(error, region) from None
    except NoCredentialsError as error:
        raise InputError(f"AWS credentials: {error}; nothing was deployed") from None
    except BotoCoreError as error:
        raise TargetError(f"AWS STS in {region} could not be reached to identify the account: {error}; nothing was "
                          "deployed") from None
    account = Account(account_id, region, pinned)
    if bootstrap:
        _check_bootstrap(account)
    return account


def _refused(error: ClientError, region: str) -> InputError | TargetError:
    """STS's refusal as one line: the caller's credentials (exit 2) or the service (exit 3)."""
    code = error.response.get("Error", {}).get("Code", "")
    if code in EXPIRED_CREDENTIALS:
        return InputError(f"AWS credentials: expired ({code}); renew them (e.g. `aws sso login`) and run again; "
                          "nothing was deployed")
    if code in REFUSED_CREDENTIALS:
        return InputError(f"AWS credentials: refused by STS in {region} ({code}: "
                          f"{error.response['Error'].get('Message', '')}); check the keys or profile; nothing was "
                          "deployed")
    return TargetError(f"AWS STS in {region}: {error}; nothing was deployed")


def _check_bootstrap(account: Account) -> None:
    """The CDK bootstrap stack, complete, in the account's region; one line with the command otherwise."""
    bootstrap = f"`sagellm cdk bootstrap aws://{account.id}/{account.region}`"
    try:
        stacks = account.client("cloudformation", CHECKS).describe_stacks(StackName=TOOLKIT_STACK)["Stacks"]
    except ClientError as error:
        if "does not exist" not in str(error):
            raise TargetError(f"CloudFormation in {account.region}: could not look for the CDK bootstrap stack "
                              f"{TOOLKIT_STACK}: {error}; nothing was deployed") from None
        stacks = []
    except BotoCoreError as error:
        raise TargetError(f"CloudFormation in {account.region} could not be reached: {error}; nothing was "
                          "deployed") from None
    status = stacks[0]["StackStatus"] if stacks else None
    if status is None or status == "DELETE_COMPLETE":
        raise InputError(f"--region {account.region}: account {account.id} is not bootstrapped for the CDK there (no "
                         f"{TOOLKIT_STACK} stack); run {bootstrap} once, then run again; nothing was deployed")
    if not status.endswith("_COMPLETE") or "ROLLBACK" in status:
        raise InputError(f"--region {account.region}: the CDK bootstrap stack {TOOLKIT_STACK} of account "
                         f"{account.id} is {status}; fix it (or run {bootstrap} again), then run again; nothing was "
                         "deployed")


def session_of(env: Mapping[str, str], region: str | None) -> boto3.session.Session:
    """A boto3 session in `region` configured like a child process with this environment (credentials, profile)."""
    return boto3_session(
        botocore_session(),
        aws_access_key_id=env.get("AWS_ACCESS_KEY_ID"),
        aws_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY"),
        aws_session_token=env.get("AWS_SESSION_TOKEN"),
        profile_name=env.get("AWS_PROFILE"),
        region_name=region,
    )


@functools.cache
def _shared_loader() -> Any:
    """The process's one botocore data loader (its parsed service models are read-only and cached per loader)."""
    return botocore.session.Session().get_component("data_loader")


def botocore_session() -> botocore.session.Session:
    """A new botocore session that reads service models through the process's one loader: each session otherwise
    parses endpoints.json and every model it touches again (~150 ms a session and client, measured; a bench makes
    about ten)."""
    core = botocore.session.Session()
    core.register_component("data_loader", _shared_loader())
    return core


def boto3_session(core: botocore.session.Session, **kwargs: Any) -> boto3.session.Session:
    """A boto3 session over `core` (boto3 appends its data folder to the shared loader's search path each time:
    kept once)."""
    session = boto3.session.Session(botocore_session=core, **kwargs)
    paths = _shared_loader().search_paths
    paths[:] = list(dict.fromkeys(paths))
    return session


def client_of(env: Mapping[str, str], service: str, config: Config = RETRIES) -> Any:
    """A client for `service` as a child process with this environment would reach it: its region, its
    AWS_ENDPOINT_URL[_SERVICE], and throttling retried with backoff."""
    url = env.get(f"AWS_ENDPOINT_URL_{service.upper().replace('-', '_')}") or env.get("AWS_ENDPOINT_URL")
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    return session_of(env, region).client(service, endpoint_url=url, config=config)  # type: ignore[call-overload]
