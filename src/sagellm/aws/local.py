"""LocalAws: moto server on loopback, extended for sagellm, as the embedded AWS control plane."""

from __future__ import annotations

import logging
import os
import signal
import socket
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, Self

import boto3

from sagellm.aws.account import boto3_session, botocore_session

# The bootstrap stack `cdk bootstrap` creates; it is infrastructure, not a leftover of a deployment.
BOOTSTRAP_STACK = "CDKToolkit"

_DUMMY_KEY = "testing"


class LocalAws:
    """moto server on a free loopback port with the sagellm extensions; a context manager.

    The server runs in a thread of this process, not a subprocess: the extensions patch moto in the
    interpreter that serves, and a thread cannot outlive the process (a killed bench leaves no server).
    moto keeps its state in module globals, so one LocalAws runs per process at a time; it starts empty
    and is emptied when it stops.
    """

    _running = False

    def __init__(self, region: str = "us-east-1", port: int = 0):
        self.region = region
        self._port = port  # 0: the kernel picks a free one at bind time, so two benches never race for one
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._clients: dict[str, Any] = {}

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Install the extensions, reset moto and serve on localhost:<free port>."""
        from moto.moto_api._internal.models import moto_api_backend
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server

        from sagellm.aws import moto_ext

        if LocalAws._running:
            raise RuntimeError("a LocalAws is already running in this process (moto's state is per process)")

        class QuietHandler(MotoRequestHandler):
            def log_request(self, *args: Any, **kwargs: Any) -> None:
                pass  # werkzeug logs every request to stderr, which would garble the bench's progress display

        moto_ext.install()
        moto_api_backend.reset()
        app = DomainDispatcherApplication(create_backend_app)
        self._server = make_server("127.0.0.1", self._port, app, threaded=True, request_handler=QuietHandler)
        server = self._server
        self._thread = threading.Thread(
            target=lambda: server.serve_forever(poll_interval=0.05), name="sagellm-moto", daemon=True
        )
        self._thread.start()
        LocalAws._running = True

    def stop(self) -> None:
        """Stop serving, close the listening socket, join the thread and empty moto."""
        from moto.moto_api._internal.models import moto_api_backend

        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server, self._thread = None, None
        self._clients.clear()
        moto_api_backend.reset()
        LocalAws._running = False

    def reset(self) -> None:
        """Empty moto (every service), keeping the server up: between tests or bench runs."""
        from moto.moto_api._internal.models import moto_api_backend

        moto_api_backend.reset()

    @property
    def running(self) -> bool:
        """Whether the server is serving."""
        return self._server is not None

    @property
    def port(self) -> int:
        """The loopback port the server listens on."""
        if self._server is None:
            raise RuntimeError("LocalAws is not running")
        return int(self._server.server_address[1])

    @property
    def endpoint_url(self) -> str:
        """Base URL of every service (127.0.0.1 works as well: moto_ext reads a template URL on any loopback host)."""
        return f"http://localhost:{self.port}"

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """A complete environment for a child process (the CDK CLI): `base` (default: os.environ) with
        every AWS setting replaced by ones that point at this server."""
        base = dict(os.environ if base is None else base)
        env = {k: v for k, v in base.items() if not k.startswith(("AWS_", "CDK_DEFAULT_"))}
        env.update(
            {
                "AWS_ENDPOINT_URL": self.endpoint_url,
                "AWS_ACCESS_KEY_ID": _DUMMY_KEY,
                "AWS_SECRET_ACCESS_KEY": _DUMMY_KEY,
                "AWS_REGION": self.region,
                "AWS_DEFAULT_REGION": self.region,
                # No profile, no instance metadata: nothing from the user's real AWS setup can leak in.
                "AWS_CONFIG_FILE": os.devnull,
                "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
                "AWS_EC2_METADATA_DISABLED": "true",
            }
        )
        return env

    def session(self) -> boto3.session.Session:
        """A boto3 session with dummy credentials in this server's region (pass `endpoint_url` to clients)."""
        # Ignore the user's AWS_PROFILE and config files, as env() does for child processes.
        core = botocore_session()
        store = core.get_component("config_store")
        for name, value in (("profile", None), ("config_file", os.devnull), ("credentials_file", os.devnull)):
            store.set_config_variable(name, value)
        return boto3_session(core, aws_access_key_id=_DUMMY_KEY, aws_secret_access_key=_DUMMY_KEY,
                             region_name=self.region)

    def client(self, service: str) -> Any:
        """A boto3 client for `service` pointed at this server (cached: creating one costs ~0.1 s)."""
        if service not in self._clients:
            self._clients[service] = self.session().client(  # type: ignore[call-overload]
                service, endpoint_url=self.endpoint_url
            )
        return self._clients[service]

    def leftovers(self) -> dict[str, list[str]]:
        """Everything a deployment could leave in this server (tagged or not), by kind; empty when clean."""
        cfn, sm, aas = (
            self.client("cloudformation"),
            self.client("sagemaker"),
            self.client("application-autoscaling"),
        )
        found = {
            "stacks": [
                s["StackName"]
                for s in cfn.describe_stacks()["Stacks"]
                if s["StackName"] != BOOTSTRAP_STACK and s["StackStatus"] != "DELETE_COMPLETE"
            ],
            "endpoints": [e["EndpointName"] for e in sm.list_endpoints()["Endpoints"]],
            "endpoint_configs": [
                c["EndpointConfigName"] for c in sm.list_endpoint_configs()["EndpointConfigs"]
            ],
            "models": [m["ModelName"] for m in sm.list_models()["Models"]],
            "inference_components": [
                c["InferenceComponentName"] for c in sm.list_inference_components()["InferenceComponents"]
            ],
            "scalable_targets": [
                t["ResourceId"]
                for t in aas.describe_scalable_targets(ServiceNamespace="sagemaker")["ScalableTargets"]
            ],
            "scaling_policies": [
                p["PolicyName"]
                for p in aas.describe_scaling_policies(ServiceNamespace="sagemaker")["ScalingPolicies"]
            ],
            "alarms": [a["AlarmName"] for a in self.client("cloudwatch").describe_alarms()["MetricAlarms"]],
        }
        return {kind: names for kind, names in found.items() if names}


def cannot_listen(port: int) -> str | None:
    """Why a server could not listen on localhost:`port` now (None: it could), probed as werkzeug binds: with
    SO_REUSEADDR, so that an earlier server's connections closing in TIME_WAIT do not hold the port; a listener does."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
            probe.listen()
        except OSError as error:
            return error.strerror or str(error)
    return None


def serve(port: int, region: str, say: Callable[[str], None]) -> None:
    """`sagellm local-aws`: a bootstrapped LocalAws on `port` until SIGINT or SIGTERM (also when SIGINT is
    ignored, as in a background job)."""
    from sagellm.aws import cdk_cli
    from sagellm.errors import InputError

    logging.getLogger("moto").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message="Tried to parse", category=UserWarning)

    def stop(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    if (why := cannot_listen(port)) is not None:  # werkzeug would print its own message and exit 1 on a busy port
        raise InputError(f"--port: {port}: {why}; pick a free port")
    signal.signal(signal.SIGTERM, stop)
    aws = LocalAws(region, port)
    aws.start()
    try:
        with tempfile.TemporaryDirectory(prefix="sagellm-local-aws-") as work:
            cdk_cli.bootstrap(cdk_cli.cli_env(aws.env()), Path(work))
        url = aws.endpoint_url
        say(f"local AWS at {url} (region {region}, CDK-bootstrapped); use it from another shell with\n"
            f"  export AWS_ENDPOINT_URL={url} AWS_ACCESS_KEY_ID={_DUMMY_KEY} AWS_SECRET_ACCESS_KEY={_DUMMY_KEY} "
            f"AWS_REGION={region}\nCtrl-C to stop")
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        aws.stop()
