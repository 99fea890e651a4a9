"""Workloads: unique reproducible prompts, shared prefixes, length distributions, datasets, token counting."""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path

import pytest

from sagellm.bench.client.workload import Lengths, TokenCounter, Workload, WorkloadOptions
from sagellm.errors import InputError
from sagellm.planner import Payload


def workload(payload: Payload | None = None, **options: object) -> Workload:
    return Workload(WorkloadOptions(**options), payload or Payload(64, 16))  # type: ignore[arg-type]


def test_every_request_gets_its_own_prompt_of_the_asked_length() -> None:
    w = workload()
    requests = [w.next() for _ in range(500)]
    assert len({r.prompt for r in requests}) == 500
    assert {r.input_tokens for r in requests} == {64} == {len(r.prompt.split()) for r in requests}
    assert {r.max_new_tokens for r in requests} == {16}
    # Not only the whole prompts: their openings differ too, so no prefix cache can serve one from another.
    assert len({r.prompt.split()[0:3] and " ".join(r.prompt.split()[:3]) for r in requests}) > 450
    assert [r.index for r in requests] == list(range(500))


def test_the_same_seed_gives_the_same_requests_and_another_seed_others() -> None:
    a, b, c = workload(seed=1), workload(seed=1), workload(seed=2)
    first = [a.next() for _ in range(20)]
    assert first == [b.next() for _ in range(20)]
    assert not {r.prompt for r in first} & {c.next().prompt for _ in range(20)}
    assert a.request(7) == first[7]  # request i is the same whenever it is asked for


def test_a_shared_prefix_opens_every_prompt_with_the_same_tokens() -> None:
    w = workload(Payload(100, 8), shared_prefix=60)
    prompts = [w.next().prompt.split() for _ in range(50)]
    assert {len(p) for p in prompts} == {100}
    assert len({" ".join(p[:60]) for p in prompts}) == 1
    assert len({" ".join(p[60:]) for p in prompts}) == 50


def test_several_shared_prefixes_each_open_some_prompts_drawn_with_the_seed() -> None:
    w = workload(Payload(100, 8), shared_prefix=60, prefixes=4, seed=5)
    requests = [w.next() for _ in range(200)]
    openings = [" ".join(r.prompt.split()[:60]) for r in requests]
    assert len(set(openings)) == 4  # each of the four is used
    for r, opening in zip(requests, openings, strict=True):  # the segments a simulation sends say the same
        (key, tokens), = w.prefix_segments(r.index)
        assert tokens == 60 and key == f"prefix-{w.prefix_index(r.index)}"
        assert opening == w.prefixes[w.prefix_index(r.index)]
    assert workload(Payload(100, 8), shared_prefix=60, prefixes=4, seed=5).request(17) == requests[17]
    assert w.describe("tgi").shared_prefixes == 4


def test_one_shared_prefix_is_what_it_always_was() -> None:
    one = workload(Payload(100, 8), shared_prefix=60)
    assert one.prefixes == [one.prefix] and one.prefix_index(9) == 0
    assert one.describe("tgi").shared_prefixes == 1
    assert workload(Payload(100, 8)).shared_prefixes() is None  # nothing for a simulation to read


def test_several_prefixes_need_a_length() -> None:
    with pytest.raises(InputError, match=r"^WorkloadOptions.prefixes: 3 prefixes of 0 tokens: give "
                                         r"WorkloadOptions.shared_prefix their length$"):
        workload(prefixes=3)


def test_a_shared_prefix_must_leave_a_unique_part_and_is_not_for_datasets(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"^WorkloadOptions.shared_prefix: 64 tokens leave no unique part in prompts as "
                                         r"short as 64 tokens"):
        workload(shared_prefix=64)
    with pytest.raises(InputError, match=r"as short as 32 tokens \(WorkloadOptions.input_tokens 32-96\)"):
        workload(input_tokens="32-96", shared_prefix=40)
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "a b c"}\n')
    with pytest.raises(InputError, match="^WorkloadOptions.shared_prefix: not with WorkloadOptions.dataset "):
        workload(dataset=data, shared_prefix=1)


@pytest.mark.parametrize("text,kind,low,high,mean", [
    ("512", "fixed", 512, 512, 512), ("512:64", "normal", 320, 704, 512), ("256-1024", "uniform", 256, 1024, 640),
    (" 8 : 10 ", "normal", 1, 38, 8),
])
def test_lengths_parse_fixed_normal_and_uniform(text: str, kind: str, low: int, high: int, mean: float) -> None:
    lengths = Lengths.parse(text, "WorkloadOptions.input_tokens")
    assert (lengths.kind, lengths.low, lengths.high, lengths.mean) == (kind, low, high, mean)
    rng = random.Random(0)
    draws = [lengths.draw(rng) for _ in range(4000)]
    assert low <= min(draws) and max(draws) <= high
    if kind == "uniform":
        assert {min(draws), max(draws)} == {low, high}
    if text == "512:64":
        assert statistics.fmean(draws) == pytest.approx(512, abs=4)
        assert statistics.stdev(draws) == pytest.approx(64, rel=0.05)


@pytest.mark.parametrize("text", ["", "abc", "0", "12-4", "5:-1", "1.5", "3-"])
def test_lengths_reject_what_is_not_a_length_naming_the_option(text: str) -> None:
    with pytest.raises(InputError, match=r"^WorkloadOptions.output_tokens: .* \(use 512 \(fixed\), 512:64 \(mean:stddev\) "
                                         r"or 256-1024 \(min-max\)\)$"):
        Lengths.parse(text, "WorkloadOptions.output_tokens")


def test_length_distributions_shape_the_requests_and_size_the_plan() -> None:
    w = workload(input_tokens="100-300", output_tokens="50:10")
    requests = [w.next() for _ in range(2000)]
    ins = [r.input_tokens for r in requests]
    assert min(ins) == 100 and max(ins) == 300
    assert statistics.fmean(r.max_new_tokens for r in requests) == pytest.approx(50, abs=1)
    assert w.payload() == Payload(200, 50)
    assert w.longest() == (300, 80)


def test_jsonl_dataset_prompts_with_and_without_output_lengths(tmp_path: Path) -> None:
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"prompt": "one two three", "output_tokens": 5}\n\n{"prompt": "four five"}\n')
    w = workload(Payload(8, 7), dataset=data, seed=3)
    requests = [w.next() for _ in range(6)]
    assert {(r.prompt, r.input_tokens, r.max_new_tokens) for r in requests} == {
        ("one two three", 3, 5), ("four five", 2, 7)}
    assert [r.prompt for r in requests[:2]] * 3 == [r.prompt for r in requests]  # cycles in a seeded order
    assert w.payload() == Payload(round(2.5), 5)
    record = w.describe("tgi")
    assert (record.prompts, record.input_tokens, record.output_tokens, record.dataset_entries) == (
        "dataset", "dataset", "7", 2)


def test_sharegpt_dataset_takes_the_first_human_turn_and_the_replys_length(tmp_path: Path) -> None:
    data = tmp_path / "sharegpt.json"
    data.write_text(json.dumps([
        {"id": "a", "conversations": [{"from": "human", "value": "hi there"}, {"from": "gpt", "value": "a b c d"}]},
        {"id": "b", "conversations": [{"from": "gpt", "value": "orphan"}]},  # no human turn: skipped
        {"id": "c", "conversations": [{"from": "system", "value": "x"}, {"from": "human", "value": "why"},
                                      {"from": "gpt", "value": "because"}]},
    ]))
    w = workload(dataset=data)
    assert sorted((r.prompt, r.max_new_tokens) for r in (w.next(), w.next())) == [("hi there", 4), ("why", 1)]
    assert w.describe("chat").output_tokens == "dataset"


def test_a_bad_dataset_says_file_line_what_and_the_fix(tmp_path: Path) -> None:
    data = tmp_path / "bad.jsonl"
    data.write_text('{"prompt": "ok"}\nnot json\n{"text": "x"}\n{"prompt": "y", "output_tokens": 0}\n')
    with pytest.raises(InputError) as exc:
        workload(dataset=data)
    assert exc.value.messages == [
        f"{data}:2: not JSON: Expecting value",
        f'{data}:3: needs a non-empty "prompt" string, e.g. {{"prompt": "...", "output_tokens": 128}}',
        f"{data}:4: output_tokens: 0 must be a positive integer",
    ]
    with pytest.raises(InputError, match="^WorkloadOptions.dataset: .*missing.jsonl: cannot be read"):
        workload(dataset=tmp_path / "missing.jsonl")
    (tmp_path / "empty.json").write_text("[]")
    with pytest.raises(InputError, match="holds no prompt"):
        workload(dataset=tmp_path / "empty.json")


def trained_tokenizer(folder: Path) -> Path:
    """A real tokenizer.json: byte-level BPE like GPT-2's, trained offline on the words the workload uses."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from sagellm.bench.client.workload import VOCABULARY

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    # A small vocabulary: most words end up as several sub-word tokens, as a real model's rarer words do.
    trainer = trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([" ".join(VOCABULARY)] * 10, trainer)
    folder.mkdir()
    tok.save(str(folder / "tokenizer.json"))
    return folder


def test_a_tokenizer_builds_prompts_of_exactly_the_asked_tokens_not_words(tmp_path: Path) -> None:
    folder = trained_tokenizer(tmp_path / "tok")
    counter = TokenCounter(folder)
    w = workload(Payload(50, 4), tokenizer=folder)
    requests = [w.next() for _ in range(30)]
    for r in requests:
        assert r.counted_by == "tokenizer"
        assert r.input_tokens == counter.count(r.prompt)
        assert abs(r.input_tokens - 50) <= 2  # decoding and encoding again may merge at most a few pieces
        assert len(r.prompt.split()) < 40  # far fewer words than tokens with this tokenizer
    assert w.describe("tgi").token_counter == "tokenizer"


def test_a_tokenizer_folder_without_tokenizer_json_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"^WorkloadOptions.tokenizer: .*: no tokenizer.json there"):
        TokenCounter(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(InputError, match="not a tokenizers file"):
        TokenCounter(tmp_path)
