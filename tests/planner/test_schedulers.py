"""Each engine's copy schedules as its pinned version does (planner/batching.py SCHEDULERS): vLLM V1's
token-budgeted passes over paged KV with preemption, SGLang's prefill-first alternation with retraction, TGI's
reserved KV. Driven turn by turn on a step model whose costs are simple to read: 1 s per pass plus 1 ms per token
in it, so a pass's duration says what was in it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from sagellm.engines import Limits
from sagellm.planner import StepModel
from sagellm.planner.batching import DONE, RUNNING, CopyScheduler, Sequence


@dataclass(frozen=True)
class Ruler:
    """Step times that count tokens: 1 s a pass, 1 ms a token (prompt or decode)."""

    def prefill_s(self, tokens: int, sequences: int = 1, prior_pairs: int = 0) -> float:
        return 1.0 + tokens / 1000

    def decode_step_s(self, batch: int, context_tokens: int) -> float:
        return 1.0 + batch / 1000

    def mixed_step_s(self, prompt_tokens: int, prompts: int, batch: int, context_tokens: int,
                     prior_pairs: int = 0) -> float:
        return 1.0 + (prompt_tokens + batch) / 1000


def copy_of(scheduling: str, *, budget: int = 512, kv: int = 100_000, running: int | None = None,
            block: int = 1) -> CopyScheduler:
    limits = Limits(max_input_tokens=4096, max_total_tokens=8192, max_batch_prefill_tokens=budget,
                    max_batch_total_tokens=kv, max_concurrent_requests=None, max_batch_size=running,
                    kv_block_tokens=block)
    return CopyScheduler(cast(StepModel, Ruler()), limits, scheduling=scheduling)


def passes(copy: CopyScheduler, turns: int = 1) -> list[float]:
    """The passes of the next `turns` turns (seconds each)."""
    return [s for _ in range(turns) for s in copy.turn()]


def run(copy: CopyScheduler, limit: int = 10_000) -> list[float]:
    """Every pass until the copy is idle."""
    out: list[float] = []
    while (copy.queue or copy.running) and len(out) < limit:
        out += passes(copy)
    return out


def test_vllm_chunks_a_long_prompt_into_the_budget_while_running_sequences_keep_decoding() -> None:
    copy = copy_of("vllm", budget=512)
    first = Sequence(100, 50, 0.0, None)
    copy.submit(first)
    assert passes(copy) == [1.1]  # the 100-token prompt in one pass
    long = Sequence(1200, 10, 0.0, None)
    copy.submit(long)

    # One pass each: first's decode token plus the rest of the budget (511) of the long prompt, three times.
    assert passes(copy, 3) == [1.512, 1.512, 1.179]  # 1 + 511, 1 + 511, 1 + 178 tokens
    assert first.generated == 4  # a token every pass: decoding never paused for the prompt
    assert long.generated == 1 and long.first_token_s == copy.sim_s  # sampled by the pass that ended its prompt


def test_vllm_admits_what_the_prompts_need_and_tgi_what_prompt_and_output_reserve() -> None:
    pool = 4 * 600  # four prompts of 500 with room for 100 tokens each, or two prompt+output reservations
    vllm, tgi = copy_of("vllm", kv=pool, budget=4096), copy_of("tgi", kv=pool, budget=4096)
    for copy in (vllm, tgi):
        for _ in range(4):
            copy.submit(Sequence(500, 700, 0.0, None))
        passes(copy)

    assert len(vllm.running) == 4 and not vllm.queue  # KV is taken as it is computed
    assert len(tgi.running) == 2 and len(tgi.queue) == 2  # each reserved 1200 tokens up front


def test_vllm_preempts_the_latest_admitted_when_blocks_run_out_and_recomputes_it_later() -> None:
    copy = copy_of("vllm", kv=1280, budget=4096, block=16)
    seqs = [Sequence(300, 200, 0.0, None) for _ in range(4)]  # 4 × 304 tokens of blocks: fits; 4 × 500 does not
    for seq in seqs:
        copy.submit(seq)

    run(copy)

    assert all(s.state == DONE and s.generated == 200 for s in seqs)
    assert copy.preempted >= 1 and copy.kv_free == 1280
    # First come, first served: the earliest admitted were never preempted and finished first.
    ends = [s.last_token_s for s in seqs]
    assert ends == sorted(ends)  # type: ignore[type-var]


def test_sglang_pauses_decoding_for_a_prefill_pass_and_decodes_when_nothing_can_be_admitted() -> None:
    copy = copy_of("sglang", budget=512)
    first = Sequence(100, 50, 0.0, None)
    copy.submit(first)
    assert passes(copy) == [1.1]  # prefill alone
    assert passes(copy) == [1.001]  # nothing waits: one decode step
    copy.submit(Sequence(1200, 10, copy.sim_s, None))

    # Prefill first: three prompt chunks (512, 512, 176 tokens) while first's decoding waits.
    assert passes(copy, 3) == [1.512, 1.512, 1.176]
    assert first.generated == 2
    assert passes(copy) == [1.002]  # then both decode


def test_sglang_admits_against_the_output_it_expects_the_running_ones_still_to_make() -> None:
    # 2500 tokens: after the first prompt 2000 are free, less 0.7 × its 999 tokens still to come leaves 1301; a
    # second prompt of 500 with its 1000 tokens of output (1501) waits. vLLM needs room for the prompt alone.
    sglang, vllm = copy_of("sglang", kv=2500, budget=4096), copy_of("vllm", kv=2500, budget=4096)
    for copy in (sglang, vllm):
        copy.submit(Sequence(500, 1000, 0.0, None))
        passes(copy)
        copy.submit(Sequence(500, 1000, copy.sim_s, None))
        passes(copy)

    assert len(sglang.running) == 1 and len(sglang.queue) == 1
    assert len(vllm.running) == 2


def test_sglang_retracts_the_sequence_with_the_fewest_output_tokens_when_decoding_runs_out() -> None:
    # The estimate of old's remaining output falls 0.001 a step until new fits beside it (~430 steps in); then
    # both decode and the pool runs out before either is done.
    copy = copy_of("sglang", kv=1500, budget=4096)
    old, new = Sequence(100, 2000, 0.0, None), Sequence(50, 500, 0.0, None)
    copy.submit(old)
    passes(copy)
    copy.submit(new)
    for _ in range(2000):
        passes(copy)
        if new.state == RUNNING:
            break
    assert new.state == RUNNING and old.generated > 400  # admitted late, on the falling estimate

    for _ in range(2000):
        passes(copy)
        if new.state != RUNNING:
            break

    assert new.state != DONE and new.computed == 0 and new in copy.queue  # fewest output tokens: retracted
    assert old.state == RUNNING
    run(copy)
    assert old.state == new.state == DONE and (old.generated, new.generated) == (2000, 500)
    assert copy.kv_free == 1500


def test_a_shared_prefix_is_computed_once_and_then_served_from_the_prefix_cache() -> None:
    copy = copy_of("vllm", budget=4096, kv=10_000, block=16)
    first = Sequence(1000, 2, 0.0, None, prefix=770)  # 768 of the prefix in whole blocks
    copy.submit(first)
    assert passes(copy) == [2.0]  # all 1000 prompt tokens: nothing cached yet
    run(copy)
    assert copy.cached_prefix == 768 and copy.kv_free == 10_000 - 768  # the cache keeps the prefix's blocks

    second = Sequence(1000, 2, copy.sim_s, None, prefix=770)
    copy.submit(second)
    assert passes(copy) == [1.232]  # only the 232 tokens past the cached blocks
    run(copy)
    assert second.state == DONE and copy.kv_free == 10_000 - 768


def test_sglang_serves_a_shared_prefix_from_its_radix_cache_too() -> None:
    copy = copy_of("sglang", budget=4096, kv=10_000)
    for start in (0.0, 100.0):
        seq = Sequence(1000, 2, start, None, prefix=700)
        copy.submit(seq)
        run(copy)
    assert copy.cached_prefix == 700 and seq.state == DONE
