"""An existing TGI or OpenAI-compatible server as the bench's target, and what the other targets share
about reaching a server (its address, whether it is sagellm's emulator)."""

from __future__ import annotations

import json
import os
import socket
import urllib.error
import urllib.parse
import urllib.request

from sagellm.bench.client.transports import APIS, TGI, Api, HttpTransport, Transport
from sagellm.clock import REAL, Clock
from sagellm.errors import InputError, TargetError
from sagellm.results.schema import Teardown


def api_for(api: str, url: str | None) -> str:
    """The API `--api` names; `auto` is OpenAI completions for a URL with /v1, else TGI's generate."""
    if api != "auto":
        return api
    return "openai" if url and "/v1" in url else "tgi"


def emulator_clock(url: str) -> Clock | None:
    """The clock of sagellm's emulator at `url` (its `/info`, the same figure as every reply's
    `X-Sagellm-Time-Scale`), or None when the server is no emulator or does not answer."""
    _, info = _get_json(f"{url.rstrip('/').removesuffix('/v1')}/info")
    if not (isinstance(info, dict) and info.get("emulated") is True):
        return None
    scale = info.get("time_scale", 1.0)
    return Clock(float(scale)) if isinstance(scale, int | float) and 0 < scale <= 1 else REAL


def runtime_clock() -> Clock | None:
    """The clock of the emulator the SageMaker runtime points at (AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME), or
    None where it points at no emulator."""
    url = os.environ.get("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME")
    return emulator_clock(url) if url else None


def http_address(url: str) -> tuple[str, int]:
    """Host and port of an http(s) server URL; an input error when the URL is not one."""
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        port = -1
    if parts.scheme not in ("http", "https") or not parts.hostname or port < 0:
        raise InputError(f"--url: {url!r} must be an http(s) URL of a TGI or OpenAI-compatible server "
                         "(e.g. http://localhost:8080)")
    return parts.hostname, port


def check_reachable(url: str, timeout_s: float = 5.0) -> None:
    """Fail in one line when nothing answers at the server's address: before anything is planned or written."""
    host, port = http_address(url)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise TargetError(f"--url: {url}: nothing answers at {host}:{port} ({reason}); start the server or fix "
                          "the URL") from None


def _get_json(url: str) -> tuple[int | None, object]:
    """GET a JSON document: (HTTP status, body), (status, None) if not JSON, (None, None) if unreachable."""
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            status, body = reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except OSError:
        return None, None
    try:
        return status, json.loads(body)
    except ValueError:
        return status, None


def served_models(base: str) -> list[str] | None:
    """The model names an OpenAI-compatible server serves (`/v1/models`), or None if it does not say."""
    status, body = _get_json(f"{base}/v1/models")
    data = body.get("data") if status == 200 and isinstance(body, dict) else None
    if not isinstance(data, list):
        return None
    return [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m]


def runtime_is_emulated() -> bool:
    """Whether the SageMaker runtime was pointed (AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME) at sagellm's emulator."""
    return runtime_clock() is not None  # the emulator's /info says so, with its time scale


class HttpTarget:
    """An existing TGI or OpenAI-compatible (vLLM) server: no deploy, no teardown.

    The OpenAI `model` field is the name the server serves (`served_model`, or the one `/v1/models`
    lists), independent of the catalog model that labels the run and predicts it.
    """

    kind = "http"
    emulated = False
    deploys = False

    def __init__(self, url: str, api: str, served_model: str | None = None, catalog_model: str | None = None):
        http_address(url)
        self.endpoint: str | None = url
        self.base = url.rstrip("/").removesuffix("/v1")
        self.requested_api = api  # tgi | openai | chat | auto (decided when the server is reached)
        self.api: Api = APIS.get(api, TGI)
        self.served_model = served_model
        self.catalog_model = catalog_model

    def deploy(self) -> Transport:
        status, info = _get_json(f"{self.base}/info")  # TGI's (and the emulator's) self-description
        self.emulated = isinstance(info, dict) and info.get("emulated") is True
        name = self.requested_api
        if name == "auto":
            name = api_for("auto", self.endpoint)
            if name == "tgi" and status == 404:
                raise InputError(f"--api auto: {self.base}/info answered 404, so {self.base} is no TGI server; "
                                 "for an OpenAI-compatible one (vLLM) use --api openai (or a URL ending in /v1)")
        self.api = APIS[name]
        if self.api is not TGI:  # OpenAI-style bodies name the model the server serves
            self.served_model = self.served_model or self._discover_model()
        # The transport appends the API's route (/generate_stream, /v1/completions, /v1/chat/completions).
        return HttpTransport(self.base, self.api, self.served_model or "")

    def _discover_model(self) -> str:
        names = served_models(self.base)
        if names is not None and len(names) == 1:
            return names[0]
        if names:
            raise InputError(f"--served-model: {self.base} serves {', '.join(names)}; name the one to bench")
        if self.catalog_model:  # a server without /v1/models (older servers): send the catalog id as is
            return self.catalog_model
        raise InputError(f"--served-model: {self.base}/v1/models does not list the served model; "
                         "give --served-model NAME (the server's name for it)")

    def teardown(self) -> Teardown:
        return Teardown(status="not-applicable", detail="existing server: nothing deployed")

    def may_be_left(self) -> list[str]:
        return []
