"""One token check for every path: exact messages, never the token itself."""

from __future__ import annotations

from pathlib import Path

import pytest
from profile_helpers import LLAMA2_7B

from sagellm.errors import InputError
from sagellm.profiles import resolve
from sagellm.profiles.loader import all_sources, load_profile
from sagellm.profiles.tokens import gated_without_secret, token_errors

# Shaped like real ones (prefix + 34 letters); not real tokens.
USER_TOKEN = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh"
ORG_TOKEN = "api_org_" + "ZyXwVuTsRqPoNmLkJiHgFeDcBaZyXwVuTs"

TOKEN_HERE = ("looks like a Hugging Face access token; a token never goes here: store it in Secrets Manager and set "
              "hf_token_secret: <secret name or ARN>")
SECRET_IS_TOKEN = ("looks like a Hugging Face access token itself; give the name or ARN of the Secrets Manager secret "
                   "that holds the token (e.g. prod/huggingface/token)")
VARIABLE = ("a token variable never goes in a container environment: store it in Secrets Manager and set "
            "hf_token_secret: <secret name or ARN>")


def refused(write, text: str) -> list[str]:
    write("t.yaml", text)
    with pytest.raises(InputError) as exc:
        load_profile("t", all_sources(Path(write("unused.yml", "name: unused\n")).parent))
    assert not any(USER_TOKEN in m or ORG_TOKEN in m for m in exc.value.messages)  # never echoed
    return exc.value.messages


@pytest.mark.parametrize("token", [USER_TOKEN, ORG_TOKEN])
def test_a_token_anywhere_in_a_profile_is_refused_at_its_line(write, team_dir: Path, token: str) -> None:
    path = team_dir / "t.yaml"
    assert refused(write, f"""
        name: t
        extends: max-throughput
        description: "key {token}"
        tags:
          owner: {token}
        serving:
          environment:
            CUDA_GRAPHS: {token}
        """) == [
        f"{path}:3: description: {TOKEN_HERE}",
        f"{path}:5: tags.owner: {TOKEN_HERE}",
        f"{path}:8: serving.environment.CUDA_GRAPHS: {TOKEN_HERE}",
    ]


@pytest.mark.parametrize("token", [USER_TOKEN, ORG_TOKEN])
def test_a_token_given_as_the_secret_name_is_refused(write, team_dir: Path, token: str) -> None:
    assert refused(write, f"name: t\nextends: max-throughput\nhf_token_secret: {token}\n") == [
        f"{team_dir / 't.yaml'}:3: hf_token_secret: {SECRET_IS_TOKEN}"
    ]


def test_a_token_variable_is_refused_whatever_its_value(write, team_dir: Path) -> None:
    assert refused(write, "name: t\nextends: max-throughput\nserving:\n  environment:\n    HF_API_TOKEN: x\n") == [
        f"{team_dir / 't.yaml'}:5: serving.environment.HF_API_TOKEN: {VARIABLE}"
    ]


def test_a_token_as_a_key_is_refused_without_naming_the_key(write, team_dir: Path) -> None:
    # The value is a YAML boolean: the schema's own complaint quotes the key, redacted.
    assert refused(write, f"name: t\nextends: max-throughput\ntags:\n  {USER_TOKEN}: yes\n") == [
        f"{team_dir / 't.yaml'}:3: tags: a key {TOKEN_HERE}",
        f"{team_dir / 't.yaml'}:4: tags.<token>: True: Input should be a valid string; quote it: \"True\"",
    ]


def test_secret_names_and_arns_are_accepted_and_other_text_is_not() -> None:
    good = ["prod/huggingface/token", "hf-token", "arn:aws:secretsmanager:us-east-1:123456789012:secret:hf-AbCdEf"]
    assert all(token_errors({"hf_token_secret": name}) == [] for name in good)
    assert token_errors({"hf_token_secret": "my token"}) == [
        ("hf_token_secret: is not a Secrets Manager secret name (1–512 of A-Z a-z 0-9 / _ + = . @ -) or secret ARN; "
        "give the name or ARN of the secret that holds the token")
    ]


def test_short_hf_words_are_not_tokens() -> None:
    assert token_errors({"tags": {"team": "hf_platform", "model": "hf_hub_download"}}) == []


def test_the_same_words_come_from_plan_show_and_validate_paths(write, team_dir: Path) -> None:
    # `plan` and `profiles show` resolve through load_profile: the same function, the same message.
    write("t.yaml", f"name: t\nextends: max-throughput\nhf_token_secret: {USER_TOKEN}\n")
    with pytest.raises(InputError) as exc:
        resolve("t", LLAMA2_7B, "ml.g5.2xlarge", profiles_dir=team_dir)
    assert exc.value.messages == [f"{team_dir / 't.yaml'}:3: hf_token_secret: {SECRET_IS_TOKEN}"]


def test_gated_models_without_a_secret_are_named_with_the_fix() -> None:
    assert gated_without_secret([LLAMA2_7B], has_secret=True) == []
    assert gated_without_secret([LLAMA2_7B], has_secret=False) == [
        ("meta-llama/Llama-2-7b-hf is gated on the Hugging Face Hub and no hf_token_secret is set: the endpoint would "
        "never start; store a token that has access in Secrets Manager and pass -c hf_token_secret=<secret name or "
        "ARN> (or hf_token_secret: in the profile)")
    ]
