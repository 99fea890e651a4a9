"""Prompt prefixes as chains of segments, each model copy's prefix cache, and how the endpoint routes by them.

A request's shareable prompt is a tuple of segments `(key, tokens)`. A key stands for everything from the prompt's
start to the segment's end (a chain key, as vLLM V1's block hashes chain each block's hash onto its parent's:
vllm 0.30.0 v1/core/kv_cache_utils.py hash_block_tokens), so two prompts that share a key share every token up to
it; the tokens after the last segment are the request's own. An `int` N is one segment `("shared", N)` every
request shares (the bench's `--shared-prefix`).

Each copy keeps an LRU cache of segments in whole KV blocks (`PrefixCache`), as vLLM V1 keeps computed full blocks
under their hashes after their request ends and evicts them lazily, least recently freed first, when new blocks are
needed (vllm 0.30.0 v1/core/block_pool.py: BlockPool.get_new_blocks pops the free queue's head and
_maybe_evict_cached_block drops its hash; free_blocks appends a request's blocks tail first, so a chain's last
blocks go first; v1/core/kv_cache_manager.py get_computed_blocks finds the longest cached chain, at most all but the
prompt's last token). SGLang's radix cache (sglang 0.5.20 srt/mem_cache/radix_cache.py: match_prefix, evict by
last access among unlocked leaves, inc_lock_ref/dec_lock_ref while a request runs) matches token by token; here it
matches whole segments, rounded down to its page (1 token). What a running sequence uses is pinned (ref counts,
lock refs) and never evicted; the rest counts as free KV for admission, as SGLang's PrefillAdder counts
`available_size() + evictable_size()` (srt/managers/schedule_policy.py).

CONVENTION (conversations rely on it): when a sequence ends, its copy caches its generated tokens as one more
segment keyed `reply_key(segments)`, after its prompt segments (vLLM V1 caches full blocks of generated tokens too),
when those segments cover its whole prompt (otherwise the reply follows tokens no later prompt names). A
conversation's next turn lists `(*turn_segments, (reply_key(turn_segments), reply_tokens), (new_key, user_tokens))`.

Routing (`Routing`) follows SageMaker's ProductionVariantRoutingConfig (botocore 1.44.8 sagemaker service-2.json):
LEAST_OUTSTANDING_REQUESTS, RANDOM, PREFIX_AWARE (requests whose first PrefixLength bytes of the body, or
characters of the OpenAI messages' text, are equal go to the copy that served that prefix, unless its in-flight
count reached ConcurrencyThreshold: then to another copy under it), and KV_AWARE (vLLM image only: the copy whose
cache holds the longest start of the prompt, weighed against how busy it is).
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Literal, get_args

Segment = tuple[Hashable, int]  # (chain key, tokens of this segment)
Prefix = int | tuple[Segment, ...]  # an int N: one segment ("shared", N) that every request shares
SHARED_KEY = "shared"
RoutingStrategy = Literal["least-outstanding", "random", "prefix-aware", "kv-aware"]
ROUTING_STRATEGIES: tuple[str, ...] = get_args(RoutingStrategy)
# SageMaker's names for them (RoutingStrategy), in the same order.
SAGEMAKER_STRATEGIES = dict(zip(ROUTING_STRATEGIES,
                                ("LEAST_OUTSTANDING_REQUESTS", "RANDOM", "PREFIX_AWARE", "KV_AWARE"), strict=True))
PREFIX_LENGTH_RANGE = (1024, 65536)  # PrefixAwareRoutingPrefixLength
CONCURRENCY_THRESHOLD_RANGE = (1, 1024)  # PrefixAwareRoutingConcurrencyThreshold
# Where a simulation has token counts but no text: characters per token of English text under the catalog's
# tokenizers (OpenAI's rule of thumb, ~4), to read a PrefixLength in characters as tokens.
CHARS_PER_TOKEN = 4
_unique = itertools.count()


@dataclass(frozen=True)
class Routing:
    """How the endpoint picks a copy for each request (SageMaker's RoutingConfig)."""

    strategy: RoutingStrategy = "least-outstanding"
    prefix_length: int = 1024  # prefix-aware: leading bytes (InvokeEndpoint) or characters (OpenAI API) compared
    concurrency_threshold: int = 64  # prefix-aware: in-flight requests at which the copy is passed over


def segments_of(prefix: Prefix) -> tuple[Segment, ...]:
    """A prefix as segments: an int N is one segment shared by all."""
    if isinstance(prefix, int):
        return ((SHARED_KEY, prefix),) if prefix > 0 else ()
    return prefix


def chain_ends(segments: tuple[Segment, ...]) -> tuple[int, ...]:
    """Where each segment ends, in tokens from the prompt's start."""
    return tuple(itertools.accumulate(tokens for _, tokens in segments))


def reply_key(segments: tuple[Segment, ...]) -> Hashable:
    """The key of the reply that follows a prompt of `segments` (see the module's convention): after the last
    segment; a prompt without segments has a reply no later prompt can name (a fresh key)."""
    return (segments[-1][0], "reply") if segments else ("reply", next(_unique))


def word_segments(text: str, block_words: int) -> tuple[Segment, ...]:
    """A prompt's segments where there is text (the emulator: one token per word): each whole block of
    `block_words` words, keyed by a hash chained on the block before it, as vLLM hashes whole blocks of token ids;
    the words past the last whole block are the prompt's own."""
    words = text.split()
    out: list[Segment] = []
    key: Hashable = None
    for start in range(0, len(words) - block_words + 1, block_words):
        key = hash((key, *words[start:start + block_words]))
        out.append((key, block_words))
    return tuple(out)


def route_key(segments: tuple[Segment, ...], prefix_tokens: int) -> Hashable | None:
    """What stands for a request's first `prefix_tokens` tokens: the key of the first segment reaching that far
    (requests sharing it share those tokens), or None when they run into the request's own tokens."""
    for key, end in zip((k for k, _ in segments), chain_ends(segments), strict=True):
        if end >= prefix_tokens:
            return key
    return None


class PrefixCache:
    """One copy's cached segments in whole KV blocks, least recently used first; each entry's block tokens (what
    it adds past its parent's blocks) and how many running sequences pin it."""

    def __init__(self, block_tokens: int):
        self.block = block_tokens
        self.entries: OrderedDict[Hashable, list[int]] = OrderedDict()  # key → [block tokens, pins, chain end]
        self.held = 0  # KV tokens the cache holds (not free to the copy's sequences)
        self.unpinned = 0  # of those, what no running sequence uses (evicted on demand)

    def longest(self, segments: tuple[Segment, ...]) -> int:
        """How many leading segments the cache holds (the chain stops at the first one it does not)."""
        n = 0
        for key, _ in segments:
            if key not in self.entries:
                break
            n += 1
        return n

    def charge(self, ends: tuple[int, ...], i: int) -> int:
        """The whole-block tokens segment i adds to its chain."""
        start = ends[i - 1] - ends[i - 1] % self.block if i else 0
        return ends[i] - ends[i] % self.block - start

    def unpinned_in(self, segments: Iterable[Segment]) -> int:
        """Block tokens of `segments` (held here) that nothing pins: they stop being evictable once used."""
        return sum(e[0] for key, _ in segments if (e := self.entries[key])[1] == 0)

    def pin(self, keys: Iterable[Hashable]) -> None:
        """A running sequence uses these: not evictable until released; they become the most recently used."""
        for key in keys:
            entry = self.entries[key]
            if entry[1] == 0:
                self.unpinned -= entry[0]
            entry[1] += 1
            self.entries.move_to_end(key)

    def release(self, keys: list[Hashable]) -> None:
        """A sequence ended or was preempted: unpin, tail first (vLLM frees a request's blocks in reverse, so a
        chain's last segments are evicted before its first)."""
        for key in reversed(keys):
            entry = self.entries.get(key)
            if entry is None:
                continue
            entry[1] -= 1
            if entry[1] == 0:
                self.unpinned += entry[0]
            self.entries.move_to_end(key)

    def insert(self, key: Hashable, tokens: int, end: int, *, pinned: bool) -> None:
        """Hold a segment whose blocks a sequence computed (they pass from the sequence to the cache), its chain
        ending `end` tokens from the prompt's start. The prefix every request shares (SHARED_KEY) stays: it is
        always the most recently used, and the engines' caches kept it as long as the load went on."""
        pins = int(pinned) + (key == SHARED_KEY)
        self.entries[key] = [tokens, pins, end]
        self.held += tokens
        if not pins:
            self.unpinned += tokens

    def end(self, key: Hashable) -> int:
        """Where a held segment's chain ends (an int prefix's one key stands for whatever length computed it)."""
        return self.entries[key][2]

    def evict(self, need: int) -> int:
        """Drop unpinned segments, least recently used first, until `need` tokens are freed or none is left;
        the tokens freed."""
        freed = 0
        for key in [k for k, e in self.entries.items() if e[1] == 0]:
            if freed >= need:
                break
            tokens = self.entries.pop(key)[0]
            freed += tokens
        self.held -= freed
        self.unpinned -= freed
        return freed
