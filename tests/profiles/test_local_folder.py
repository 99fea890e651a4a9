"""A local model folder: planned from its config.json, deployed only from S3, and a missing one named as such."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sagellm.aws.account import Account
from sagellm.bench import Bench, Local, SageMaker, ServingSpec, planning
from sagellm.bench.planning import plan_bench
from sagellm.catalog import find_model, local_folder
from sagellm.errors import InputError
from sagellm.planner import Payload
from sagellm.profiles import design_for, resolve

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "tiny-model"
URI = "s3://team-models/snap/"
UPLOAD = "`sagellm weights upload snap s3://<bucket>/<prefix>/`"


@pytest.fixture
def snap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The tiny model's folder as ./snap in the working folder; no AWS credentials, so nothing can read S3."""
    shutil.copytree(TINY, tmp_path / "snap")
    monkeypatch.chdir(tmp_path)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return tmp_path / "snap"


@pytest.mark.parametrize(("name", "folder"), [
    ("./snap", "snap"), ("../x", "../x"), ("/models/x", "/models/x"), ("snap/", "snap"), ("a/b/c", "a/b/c"),
    ("snap", "snap"),  # a bare name is a folder where one exists
])
def test_names_only_a_path_has_or_an_existing_folder_mean_a_folder(snap: Path, name: str, folder: str) -> None:
    assert local_folder(name) == Path(folder)


@pytest.mark.parametrize("name", ["my-org/tiny-llama", "meta-llama/Llama-2-7b-hf", "llama2-7b", "missing"])
def test_hub_ids_catalog_names_and_missing_bare_names_are_not_folders(snap: Path, name: str) -> None:
    assert local_folder(name) is None


def test_a_missing_folder_says_no_such_folder_and_where_it_looked(snap: Path) -> None:
    with pytest.raises(InputError) as caught:
        find_model("./snapp")
    assert caught.value.messages == [(f"model: snapp: no such folder (looked for {snap.parent / 'snapp'}); give the "
                                     "folder holding the model's config.json, or a Hugging Face id")]


def test_a_file_is_not_a_model_folder(snap: Path) -> None:
    with pytest.raises(InputError, match=r"^model: snap/config.json: a file, not a folder; give the folder"):
        find_model("./snap/config.json")


def test_a_folder_is_planned_from_its_config_json_and_says_how_it_would_be_deployed(snap: Path) -> None:
    design = design_for("max-throughput", "./snap", "ml.g5.2xlarge", payload=Payload(256, 32))

    model = design.copies[0].model
    assert (model.folder, model.n_layers, model.max_context) == ("snap", 22, 2048)
    assert (f"snap is a local folder, which SageMaker cannot read: upload it with {UPLOAD}, then add "
            "-c model_s3_uri=s3://<bucket>/<prefix>/") in design.notes


def test_resolve_refuses_a_folder_without_weights_in_s3_in_one_line(snap: Path) -> None:
    with pytest.raises(InputError) as caught:
        resolve("max-throughput", "./snap", "ml.g5.2xlarge")
    assert caught.value.messages == [(f"model: snap is a local folder, which SageMaker cannot read: upload it with "
                                     f"{UPLOAD}, then add model_s3_uri=s3://<bucket>/<prefix>/")]


def test_a_folder_with_its_weights_in_s3_is_served_from_there_with_the_folders_facts(snap: Path) -> None:
    # No credentials: the facts come from the folder's config.json, not from the prefix.
    plan = resolve("max-throughput", "./snap", "ml.g5.2xlarge", model_s3_uri=URI)

    main = plan.primary
    assert main.model_data_s3_uri == URI
    assert main.environment["HF_MODEL_ID"] == "/opt/ml/model"
    assert "snap" not in main.environment.values()
    assert main.architecture is not None and main.architecture.max_context == 2048


def test_a_folder_in_a_profiles_extra_models_is_refused_as_extra_models_come_from_the_hub(
        snap: Path, tmp_path: Path) -> None:
    team = tmp_path / "profiles"
    team.mkdir()
    (team / "pair.yaml").write_text("name: pair\nextends: replicas\nserving: {tensor_parallel: 1}\n"
                                    "components:\n  copies: 1\n  extra_models:\n    - {model: ./snap}\n")
    with pytest.raises(InputError) as caught:
        resolve("pair", "mistralai/Mistral-7B-v0.1", "ml.g5.12xlarge", profiles_dir=team, model_s3_uri=URI)
    assert caught.value.messages == [("components.extra_models[0].model: snap is a local folder, which SageMaker "
                                     "cannot read, and extra models are served from the Hugging Face Hub: give "
                                     "its Hub id")]


def served(**kwargs: object) -> ServingSpec:
    return ServingSpec(profile="max-throughput", model="./snap", instance="ml.g5.2xlarge", payload=Payload(256, 32),
                       **kwargs)  # type: ignore[arg-type]


def test_the_sagemaker_bench_refuses_a_folder_before_deploying_and_the_local_one_plans_it(
        snap: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InputError) as caught:
        plan_bench(Bench(serving=served(), target=SageMaker()))
    assert caught.value.messages == [(f"ServingSpec.model: snap is a local folder, which SageMaker cannot read: upload "
                                     f"it with {UPLOAD}, then add ServingSpec.model_s3_uri=s3://<bucket>/<prefix>/")]
    # The local AWS runs no container and the emulator needs no weights.
    local = plan_bench(Bench(serving=served(), target=Local()))
    assert local.plan is not None and local.plan.primary.model_id == "snap"
    # Staged in S3, the folder passes; the account checks that follow are stood in for (tests/aws/test_account.py).
    monkeypatch.setattr(planning, "resolve_account", lambda region, bootstrap: Account("1", region, {}))
    staged = plan_bench(Bench(serving=served(model_s3_uri=URI), target=SageMaker()))
    assert staged.plan is not None and staged.plan.primary.model_data_s3_uri == URI
