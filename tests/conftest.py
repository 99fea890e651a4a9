"""Fixtures shared across test packages: one local AWS per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sagellm.aws.local import LocalAws


@pytest.fixture(scope="module")
def server() -> Iterator[LocalAws]:
    """A local AWS per test module (moto's state is process-global: one server at a time)."""
    with LocalAws() as local:
        yield local
