"""Fixtures shared across test packages: one local AWS per module."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from sagellm.aws.local import LocalAws

# Set for the whole session, before any fixture, so every child process inherits them too (a module-scoped
# fixture that starts a bench runs before the function-scoped monkeypatches below): no test asks the real AWS
# Price List or writes the user's price cache, and no credential lookup reaches an instance metadata service.
os.environ["SAGELLM_PRICE_LIST"] = "off"
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules with integration or slow tests first, each module's tests in their order.

    Under pytest-xdist (`make test`, `--dist loadfile`: a module's tests run in one worker, so a module-scoped
    fixture such as a pip install, a server or a bench whose results several tests read is built once) the
    longest modules then start first, and the quick ones fill the workers at the end rather than one long
    module running alone after the rest. Within a module the order is kept: some tests rely on it (the last one
    of tests/bench/targets/test_sagemaker_target.py stops the module's local account)."""
    slow_modules = {item.nodeid.split("::")[0] for item in items
                    if item.get_closest_marker("slow") or item.get_closest_marker("integration")}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in slow_modules)  # stable: the order within is kept


@pytest.fixture(autouse=True)
def _no_hugging_face_hub(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reaches the Hugging Face Hub or the user's cache: offline, over an empty cache of its own."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path_factory.mktemp("hf-cache")))
    from sagellm.catalog.hub import hub_model

    hub_model.cache_clear()


@pytest.fixture(autouse=True)
def _no_price_list(monkeypatch: pytest.MonkeyPatch) -> None:
    """Prices are the shipped table's (tests/catalog/test_price_list.py turns the Price List on against
    botocore's Stubber and a cache of its own; this puts it back off for the next test)."""
    monkeypatch.setenv("SAGELLM_PRICE_LIST", "off")


@pytest.fixture(scope="module")
def server() -> Iterator[LocalAws]:
    """A local AWS per test module (moto's state is process-global: one server at a time)."""
    with LocalAws() as local:
        yield local
