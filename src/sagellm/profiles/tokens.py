"""Hugging Face tokens stay out of profiles, plans, context and templates: one check for every path.

`profiles validate`, `profiles show`, `plan`, the CDK app's context keys and the LlmEndpoint construct all
call `token_errors`, so a token is refused with the same words wherever it was written. A message
names where the token is and never repeats it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

# User access tokens (`hf_…`) and organisation API tokens (`api_org_…`): a prefix and a long random run.
TOKEN = re.compile(r"(?<![A-Za-z0-9])(?:hf|api_org)_[A-Za-z0-9]{30,}")
# Variables a server reads a token from: a token is never written into a container environment.
TOKEN_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_API_TOKEN")
# Secrets Manager: a name of 1–512 characters from this set, or a secret ARN.
_SECRET_NAME = re.compile(r"^[A-Za-z0-9/_+=.@-]{1,512}$")
_SECRET_ARN = re.compile(r"^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:[A-Za-z0-9/_+=.@-]+$")

STORE_IT = "store it in Secrets Manager and set hf_token_secret: <secret name or ARN>"
TOKEN_FOUND = f"looks like a Hugging Face access token; a token never goes here: {STORE_IT}"
SECRET_IS_TOKEN = ("looks like a Hugging Face access token itself; give the name or ARN of the Secrets Manager "
                   "secret that holds the token (e.g. prod/huggingface/token)")
SECRET_BAD = ("is not a Secrets Manager secret name (1–512 of A-Z a-z 0-9 / _ + = . @ -) or secret ARN; give the "
              "name or ARN of the secret that holds the token")
VARIABLE_FOUND = f"a token variable never goes in a container environment: {STORE_IT}"

PathNamer = Callable[[tuple[str, ...]], str]


def _dotted(loc: tuple[str, ...]) -> str:
    return ".".join(loc)


def token_errors(data: Any, where: PathNamer = _dotted, loc: tuple[str, ...] = ()) -> list[str]:
    """Every token-shaped string (key or value), token variable and malformed `hf_token_secret` under `data`.

    `where(loc)` names a location (a dotted path, a file:line, a context key); the token is never echoed.
    """
    errors: list[str] = []
    if isinstance(data, dict):
        for key, value in data.items():
            here = (*loc, str(key))
            if TOKEN.search(str(key)):
                errors.append(f"{where(loc)}: a key {TOKEN_FOUND}")
            elif str(key) in TOKEN_VARIABLES and "environment" in loc:
                errors.append(f"{where(here)}: {VARIABLE_FOUND}")
                continue
            errors.extend(token_errors(value, where, here))
    elif isinstance(data, (list, tuple)):
        for i, value in enumerate(data):
            errors.extend(token_errors(value, where, (*loc, str(i))))
    elif isinstance(data, str):
        secret = bool(loc) and loc[-1] == "hf_token_secret"
        if TOKEN.search(data):
            errors.append(f"{where(loc)}: {SECRET_IS_TOKEN if secret else TOKEN_FOUND}")
        elif secret and not (_SECRET_NAME.match(data) or _SECRET_ARN.match(data)):
            errors.append(f"{where(loc)}: {SECRET_BAD}")
    return errors


def redact(text: str) -> str:
    """`text` with every token-shaped run replaced, for messages that quote a value or a key."""
    return TOKEN.sub("<token>", text)


def gated_without_secret(gated: list[str], has_secret: bool) -> list[str]:
    """Gated models that would be deployed without a token: the container could never download them."""
    if has_secret:
        return []
    return [f"{model_id} is gated on the Hugging Face Hub and no hf_token_secret is set: the endpoint would never "
            "start; store a token that has access in Secrets Manager and pass -c hf_token_secret=<secret name or "
            "ARN> (or hf_token_secret: in the profile)" for model_id in gated]
