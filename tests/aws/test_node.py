"""jsii (aws_cdk's runtime) runs the Node sagellm installs only where it would find none of its own."""

from __future__ import annotations

from pathlib import Path

from sagellm.aws.node import bundled_node, node_for_jsii


def test_without_a_node_on_path_jsii_gets_the_bundled_one(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path)}
    node_for_jsii(env)
    assert env["JSII_NODE"] == bundled_node()


def test_a_node_on_path_stays_the_users(tmp_path: Path) -> None:
    node = tmp_path / "node"
    node.write_text("#!/bin/sh\n")
    node.chmod(0o755)
    env = {"PATH": str(tmp_path)}
    node_for_jsii(env)
    assert "JSII_NODE" not in env  # jsii runs `node` from PATH


def test_a_chosen_jsii_node_is_kept(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path), "JSII_NODE": "/opt/node/bin/node"}
    node_for_jsii(env)
    assert env["JSII_NODE"] == "/opt/node/bin/node"
