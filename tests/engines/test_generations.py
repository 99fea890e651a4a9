"""The one vocabulary of server generations: a pinned container's kind and version → its generation."""

import pytest

from sagellm.engines import ENGINES, generation, generation_of
from sagellm.engines.lmi import LMI
from sagellm.engines.tgi import TGI


@pytest.mark.parametrize("container,version,expected", [
    ("tgi", "1.0.3", "tgi-1"), ("tgi", "1.4.5", "tgi-1"), ("tgi", "0.9.3", "tgi-1"),
    ("tgi", "2.0.0", "tgi-3"), ("tgi", "3.3.6", "tgi-3"), ("tgi", None, "tgi-3"), ("lmi", "0.33.0", "lmi"),
])
def test_a_pinned_container_maps_to_its_generation(container, version, expected):
    assert generation_of(container, version) == expected


def test_tgi_3_chunks_prefills_by_default_and_tgi_2_does_not() -> None:
    # One generation (TGI 2.x–3.x) for the planner; within it, what the launcher does differs by version.
    assert [TGI.chunks_prefill(v, None) for v in ("3.3.6", "3.0.1", "2.4.0", None)] == [True, True, False, True]
    assert not TGI.chunks_prefill("3.3.6", 8)  # a batch-size limit turns chunking off (PREFILL_CHUNKING=0)
    assert LMI.chunks_prefill("0.35.0", None) and LMI.chunks_prefill("0.35.0", 8)


def test_an_unknown_generation_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="known: tgi-1, tgi-3, lmi"):
        generation("tgi-9")


def test_every_engine_generation_is_known_by_name() -> None:
    for engine in ENGINES.values():
        gen = engine.generation(engine.pinned)
        assert generation(gen.name) is gen
