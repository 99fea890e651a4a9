"""What each request asks for: its prompt, how many tokens that prompt holds, and how many to generate.

- **Prompts** are unique per request by default: random words from a fixed vocabulary, drawn from a
  generator seeded with (run seed, request index), so request i of a run with seed s always carries the
  same text. One prompt for everyone would flatter the server: TGI 3 and vLLM cache shared prefixes, so
  every request after the first would skip most of its prefill. `shared_prefix` opens every prompt with
  the same N tokens, to measure prefix caching on purpose; with `prefixes` K, there are K such prefixes (each
  `shared_prefix` tokens) and request i opens with one of them, drawn with the seed (prefix-aware routing).
- **Lengths** (`--input-tokens`, `--output-tokens`): `512` (fixed), `512:64` (normal with mean 512 and
  standard deviation 64, rounded, clipped to mean ± 3 sd and at least 1) or `256-1024` (uniform integers,
  both ends included).
- **Datasets** (`--dataset FILE`): JSON Lines, one `{"prompt": "...", "output_tokens": 128}` per line
  (`output_tokens` optional: the `--output-tokens` distribution otherwise), or ShareGPT JSON (a list of
  `{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", "value": ...}]}`: the first human
  turn is the prompt and the reply's token count its output length, as vLLM's benchmark reads it).
  Entries are sent in a seeded shuffled order, cycling when the run needs more.
- **Traces** (`--trace FILE`, a Mooncake JSONL or Azure CSV trace): each request's lengths, its arrival time and
  (Mooncake) its shared prompt blocks are the trace's, in its order (see `trace`).
- **Token counts**: with `--tokenizer DIR` (a `tokenizer.json`, read offline by the `tokenizers`
  library) prompts are built and counted in real tokens; otherwise one token per whitespace-separated
  word (the emulator's rule; a real tokenizer splits English words into ~1.3 tokens). Where the server
  reports its own counts (TGI `details.input_length`, OpenAI `usage.prompt_tokens`) those are recorded
  instead, per request, with where each count came from.
"""

from __future__ import annotations

import itertools
import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sagellm.bench.client.conversation import Conversation, Conversations, Message, ThinkTimes, as_text
from sagellm.bench.client.trace import Trace, TraceOptions, load_trace
from sagellm.errors import InputError
from sagellm.planner import Payload
from sagellm.profiles.schema import U32_MAX
from sagellm.results.schema import WorkloadRecord

# Common short English words: most are one token in the tokenizers of the catalog's models.
VOCABULARY: tuple[str, ...] = tuple("""
time year people way day man thing woman life child world school state family student group country
problem hand part place case week company system program question work government number night point home
water room mother area money story fact month lot right study book eye job word business issue side kind
head house service friend father power hour game line end member law car city name team minute idea body
back parent face others level office door health person art war history party result change morning
reason research girl guy moment air teacher force education foot boy age policy music market sense nation
plan college interest death experience effect use class control care field development role effort rate
heart drug show leader light voice wife police mind price report decision son view relationship town road
arm difference value building action model season society tax director position player record paper space
ground form event official matter center couple site project activity star table need court oil situation
cost industry figure street image phone data picture practice piece land product doctor wall patient
worker news test movie north love support technology step baby computer type attention film tree source
organization hair window evidence population truth song river bed weather garden summer winter spring
autumn bread stone green blue red white black small large early late open close happy quiet strong simple
clear bright warm cold fresh slow quick short long high low deep wide young old new good great little
other same different run walk read write speak listen learn teach build carry hold bring send move grow
turn follow begin keep
""".split())  # noqa: SIM905 - one word list, readable

_LENGTH = re.compile(r"^\s*(\d+)\s*(?:([:-])\s*(\d+)\s*)?$")


@dataclass(frozen=True)
class Lengths:
    """A token-length distribution: fixed, normal (mean:stddev) or uniform (min-max)."""

    kind: Literal["fixed", "normal", "uniform"]
    a: int  # fixed: the length; normal: the mean; uniform: the minimum
    b: int = 0  # normal: the standard deviation; uniform: the maximum

    @classmethod
    def parse(cls, text: str, option: str) -> Lengths:
        """`512`, `512:64` or `256-1024`; InputError naming the option otherwise."""
        m = _LENGTH.match(text)
        fix = "use 512 (fixed), 512:64 (mean:stddev) or 256-1024 (min-max)"
        if m is None:
            raise InputError(f"{option}: {text!r} is not a length ({fix})")
        a, sep, b = int(m[1]), m[2], int(m[3] or 0)
        lengths = cls("fixed", a) if sep is None else cls("normal" if sep == ":" else "uniform", a, b)
        if lengths.kind == "uniform" and b < a:
            raise InputError(f"{option}: {text!r} is an empty range: its minimum is above its maximum ({fix})")
        if lengths.low < 1 or lengths.high > U32_MAX:
            raise InputError(f"{option}: {text!r} allows lengths outside 1 to {U32_MAX} tokens ({fix})")
        return lengths

    @property
    def low(self) -> int:
        """The shortest length it draws."""
        if self.kind == "normal":
            return max(1, self.a - 3 * self.b)
        return self.a

    @property
    def high(self) -> int:
        """The longest length it draws."""
        return {"fixed": self.a, "normal": self.a + 3 * self.b, "uniform": self.b}[self.kind]

    @property
    def mean(self) -> float:
        """Its mean (the clipped normal's is taken as its centre)."""
        return (self.a + self.b) / 2 if self.kind == "uniform" else float(self.a)

    def draw(self, rng: random.Random) -> int:
        """One length."""
        if self.kind == "fixed":
            return self.a
        if self.kind == "uniform":
            return rng.randint(self.a, self.b)
        return min(self.high, max(self.low, round(rng.gauss(self.a, self.b))))

    def __str__(self) -> str:
        return {"fixed": f"{self.a}", "normal": f"{self.a}:{self.b}", "uniform": f"{self.a}-{self.b}"}[self.kind]


class TokenCounter:
    """Counts tokens and builds texts of a given token count: a local tokenizer, or one token per word."""

    def __init__(self, tokenizer_dir: Path | None = None):
        self.name: Literal["words", "tokenizer"] = "words"
        self._tok: Any = None
        if tokenizer_dir is not None:
            path = tokenizer_dir / "tokenizer.json" if tokenizer_dir.is_dir() else tokenizer_dir
            if not path.is_file():
                raise InputError(f"WorkloadOptions.tokenizer: {tokenizer_dir}: no tokenizer.json there (download the "
                                 "model's tokenizer.json into a folder and pass that folder)")
            from tokenizers import Tokenizer

            try:
                self._tok = Tokenizer.from_file(str(path))
            except Exception as exc:  # noqa: BLE001 - the library raises a bare Exception on bad files
                raise InputError(f"WorkloadOptions.tokenizer: {path}: not a tokenizers file: {exc}") from None
            self.name = "tokenizer"

    def count(self, text: str) -> int:
        """Tokens in `text` (no special tokens: the server adds its own and reports them)."""
        if self._tok is None:
            return len(text.split())
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def text(self, words: list[str], n_tokens: int) -> str:
        """A text of `n_tokens` tokens made of `words` (given at least that many)."""
        if self._tok is None:
            return " ".join(words[:n_tokens])
        ids = self._tok.encode(" ".join(words), add_special_tokens=False).ids[:n_tokens]
        return str(self._tok.decode(ids))


@dataclass(frozen=True)
class Request:
    """One request's workload."""

    index: int  # request `index` of the run: the same prompt for the same seed
    prompt: str
    input_tokens: int  # as counted locally (the server's count replaces it where reported)
    max_new_tokens: int
    counted_by: Literal["tokenizer", "words"] = "words"
    messages: tuple[Message, ...] | None = None  # a conversation's turn: the history and its new user message
    conversation: int | None = None  # the conversation's number in the run
    turn: int | None = None  # 1-based


@dataclass(frozen=True)
class WorkloadOptions:
    """The workload options of `sagellm bench`."""

    input_tokens: str | None = None  # a Lengths spec; None: the profile's payload
    output_tokens: str | None = None
    shared_prefix: int = 0
    prefixes: int = 1  # distinct shared prefixes, each shared_prefix tokens long
    dataset: Path | None = None
    tokenizer: Path | None = None
    seed: int = 0
    turns: str | None = None  # a Lengths spec: conversations of this many turns (`conversation`); None: one request
    think_time_s: str | None = None  # a ThinkTimes spec: between a reply and its conversation's next turn
    trace: TraceOptions | None = None  # replay a trace: its lengths and arrivals (the load's level follows it)


@dataclass(frozen=True)
class _Entry:
    prompt: str
    input_tokens: int
    output_tokens: int | None


class Workload:
    """Hands out requests in order (`next()`); request i of a seed is always the same."""

    def __init__(self, options: WorkloadOptions, default: Payload):
        self.options = options
        self.counter = TokenCounter(options.tokenizer)
        self.inputs = Lengths.parse(options.input_tokens or str(default.input_tokens), "WorkloadOptions.input_tokens")
        self.outputs = Lengths.parse(options.output_tokens or str(default.output_tokens),
                                     "WorkloadOptions.output_tokens")
        self.entries = load_dataset(options.dataset, self.counter) if options.dataset else None
        if self.entries is not None:
            random.Random(f"{options.seed}/order").shuffle(self.entries)
        if options.shared_prefix and self.entries is not None:
            raise InputError("WorkloadOptions.shared_prefix: not with WorkloadOptions.dataset (the dataset's prompts "
                             "are sent as they are)")
        if options.shared_prefix and options.shared_prefix >= self.inputs.low:
            raise InputError(f"WorkloadOptions.shared_prefix: {options.shared_prefix} tokens leave no unique part "
                             f"in prompts as short as {self.inputs.low} tokens "
                             f"(WorkloadOptions.input_tokens {self.inputs})")
        if options.prefixes < 1:
            raise InputError(f"WorkloadOptions.prefixes: {options.prefixes} must be at least 1")
        if options.prefixes > 1 and not options.shared_prefix:
            raise InputError(f"WorkloadOptions.prefixes: {options.prefixes} prefixes of 0 tokens: give "
                             "WorkloadOptions.shared_prefix their length")
        # Prefix 0 is the one a single shared prefix always was (same seed, same text).
        self.prefixes = [self._words(random.Random(f"{options.seed}/prefix" + (f"/{k}" if k else "")),
                                     options.shared_prefix) for k in range(options.prefixes)]
        self.prefix = self.prefixes[0]
        self.issued = 0
        self.conversations = _conversations(options, self.entries is not None)
        self.trace: Trace | None = None
        if options.trace is not None:
            given = [name for name, value in (("input_tokens", options.input_tokens),
                                              ("output_tokens", options.output_tokens), ("dataset", options.dataset),
                                              ("shared_prefix", options.shared_prefix),
                                              ("turns", options.turns)) if value]
            if given:
                raise InputError(f"WorkloadOptions.{'/WorkloadOptions.'.join(given)}: not with WorkloadOptions.trace "
                                 "(the trace gives every request's lengths and shared blocks)")
            self.trace = load_trace(options.trace)

    def replay_from_start(self) -> None:
        """With a trace, the next request is the trace's first (a level replays it whole); else nothing."""
        if self.trace is not None:
            self.issued += -self.issued % len(self.trace.rows)

    def payload(self) -> Payload:
        """The mean request: what sizes the plan and the prediction."""
        if self.trace is not None:
            rows = self.trace.rows
            return Payload(max(1, round(sum(r.input_tokens for r in rows) / len(rows))),
                           max(1, round(sum(r.output_tokens for r in rows) / len(rows))))
        if self.entries is not None:
            inputs = sum(e.input_tokens for e in self.entries) / len(self.entries)
            outputs = [e.output_tokens for e in self.entries if e.output_tokens is not None]
            mean_out = sum(outputs) / len(outputs) if outputs else self.outputs.mean
            return Payload(max(1, round(inputs)), max(1, round(mean_out)))
        if self.conversations is not None:  # about the mean turn: half the history of a conversation of mean length
            earlier = (self.conversations.turns.mean - 1) / 2
            inputs = self.inputs.mean * (1 + earlier) + self.outputs.mean * earlier
            return Payload(max(1, round(inputs)), max(1, round(self.outputs.mean)))
        return Payload(max(1, round(self.inputs.mean)), max(1, round(self.outputs.mean)))

    def longest(self) -> tuple[int, int]:
        """The longest prompt and output it can send (for the serving limits)."""
        if self.trace is not None:
            return max(r.input_tokens for r in self.trace.rows), max(r.output_tokens for r in self.trace.rows)
        if self.entries is not None:
            outputs = [e.output_tokens or self.outputs.high for e in self.entries]
            return max(e.input_tokens for e in self.entries), max(outputs)
        if self.conversations is not None:  # the last turn of the longest conversation re-sends all the rest
            turns = self.conversations.turns.high
            return turns * self.inputs.high + (turns - 1) * self.outputs.high, self.outputs.high
        return self.inputs.high, self.outputs.high

    def sizes(self, index: int) -> tuple[int, int]:
        """Request `index`'s (input, output) tokens, without building its prompt (what a simulation sends)."""
        if self.trace is not None:
            row = self.trace.row(index)
            return row.input_tokens, row.output_tokens
        if self.entries is not None:
            request = self.request(index)
            return request.input_tokens, request.max_new_tokens
        rng = random.Random(f"{self.options.seed}/{index}")
        return self.inputs.draw(rng), self.outputs.draw(rng)

    def next(self) -> Request:
        """The run's next request."""
        index = self.issued
        self.issued += 1
        return self.request(index)

    def turn(self, conversation: Conversation) -> Request:
        """The run's next request as `conversation`'s next turn: its history and a new user message of
        `input_tokens` (the shared prefix opens only the first)."""
        index = self.issued
        self.issued += 1
        new = self.request(index, shared_prefix=conversation.turn == 0)
        messages = conversation.ask(new.prompt)
        prompt = as_text(messages)
        return Request(index, prompt, self.counter.count(prompt), new.max_new_tokens, self.counter.name, messages,
                       conversation.number, conversation.turn)

    def request(self, index: int, *, shared_prefix: bool = True) -> Request:
        """Request `index` of this run (`shared_prefix`: opened by the shared prefix, if any)."""
        rng = random.Random(f"{self.options.seed}/{index}")
        if self.trace is not None:
            prompt = self.trace.prompt(index, self._words, self.options.seed)
            return Request(index, prompt, self.counter.count(prompt), self.trace.row(index).output_tokens,
                           self.counter.name)
        if self.entries is not None:
            entry = self.entries[index % len(self.entries)]
            out = entry.output_tokens if entry.output_tokens is not None else self.outputs.draw(rng)
            return Request(index, entry.prompt, entry.input_tokens, out, self.counter.name)
        n_in, n_out = self.inputs.draw(rng), self.outputs.draw(rng)
        shared = self.options.shared_prefix if shared_prefix else 0
        prefix = self.prefixes[self.prefix_index(index)] if shared else ""
        prompt = " ".join(p for p in (prefix, self._words(rng, n_in - shared)) if p)
        return Request(index, prompt, self.counter.count(prompt), n_out, self.counter.name)

    def prefix_index(self, index: int) -> int:
        """Which of the shared prefixes request `index` opens with (its own generator: one prefix draws nothing)."""
        n = self.options.prefixes
        return random.Random(f"{self.options.seed}/{index}/prefix").randrange(n) if n > 1 else 0

    def prefix_segments(self, index: int) -> tuple[tuple[str, int], ...]:
        """Request `index`'s shared prefix as a simulation's segments (planner/prefix.py)."""
        return ((f"prefix-{self.prefix_index(index)}", self.options.shared_prefix),)

    def shared_prefixes(self) -> Callable[[int], tuple[tuple[str, int], ...]] | None:
        """What a simulation of this workload reads of its shared prefixes: None without one."""
        return self.prefix_segments if self.options.shared_prefix and self.entries is None else None

    def _words(self, rng: random.Random, n_tokens: int) -> str:
        if n_tokens <= 0:
            return ""
        return self.counter.text(rng.choices(VOCABULARY, k=n_tokens), n_tokens)

    def describe(self, api: str) -> WorkloadRecord:
        """What results.json records about the workload."""
        o, entries = self.options, self.entries
        outputs_given = entries is not None and all(e.output_tokens is not None for e in entries)
        if self.trace is not None:
            return WorkloadRecord(prompts="trace", api=api, input_tokens="trace", output_tokens="trace",
                                  token_counter=self.counter.name, tokenizer=str(o.tokenizer) if o.tokenizer else None,
                                  seed=o.seed, trace=self.trace.describe())
        return WorkloadRecord(
            prompts="unique" if entries is None else "dataset", api=api,
            input_tokens=str(self.inputs) if entries is None else "dataset",
            output_tokens="dataset" if outputs_given else str(self.outputs),
            shared_prefix_tokens=o.shared_prefix if entries is None else 0,
            shared_prefixes=o.prefixes if entries is None and o.shared_prefix else 1,
            dataset=str(o.dataset) if o.dataset else None, dataset_entries=len(entries) if entries else None,
            token_counter=self.counter.name, tokenizer=str(o.tokenizer) if o.tokenizer else None, seed=o.seed,
            **(self.conversations.describe() if self.conversations is not None else {}))


def _conversations(options: WorkloadOptions, dataset: bool) -> Conversations | None:
    """The conversations `turns` and `think_time_s` ask for; None for single requests."""
    if options.turns is None:
        if options.think_time_s is not None:
            raise InputError("WorkloadOptions.think_time_s: only with WorkloadOptions.turns (the pause between a "
                             "conversation's turns)")
        return None
    if dataset:
        raise InputError("WorkloadOptions.turns: not with WorkloadOptions.dataset (its prompts are single turns)")
    try:
        turns = Lengths.parse(options.turns, "WorkloadOptions.turns")
    except InputError:
        raise InputError(f"WorkloadOptions.turns: {options.turns!r} is not a number of turns (use 3 (fixed), 3:1 "
                         "(mean:stddev) or 2-6 (min-max), each at least 1)") from None
    think = ThinkTimes.parse(options.think_time_s or "0", "WorkloadOptions.think_time_s")
    return Conversations(turns, think, options.seed)


# --------------------------------------------------------------------------------------------- datasets

def load_dataset(path: Path, counter: TokenCounter) -> list[_Entry]:
    """Prompts from a JSONL or ShareGPT JSON file; InputError with file:line and the fix on bad input."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"WorkloadOptions.dataset: {path}: cannot be read: {exc.strerror or exc}") from None
    entries = _sharegpt(path, text, counter) if text.lstrip().startswith("[") else _jsonl(path, text, counter)
    if not entries:
        raise InputError(f"WorkloadOptions.dataset: {path}: holds no prompt (JSONL: one {{\"prompt\": ...}} per "
                         "line; or ShareGPT JSON)")
    return entries


def _jsonl(path: Path, text: str, counter: TokenCounter) -> list[_Entry]:
    out, problems = [], []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(f"{path}:{n}: not JSON: {exc.msg}")
            continue
        prompt = item.get("prompt") if isinstance(item, dict) else None
        if not isinstance(prompt, str) or not prompt.strip():
            problems.append(f"{path}:{n}: needs a non-empty \"prompt\" string, e.g. "
                            "{\"prompt\": \"...\", \"output_tokens\": 128}")
            continue
        out_tokens = item.get("output_tokens")
        if out_tokens is not None and (isinstance(out_tokens, bool) or not isinstance(out_tokens, int)
                                       or out_tokens < 1):
            problems.append(f"{path}:{n}: output_tokens: {out_tokens!r} must be a positive integer")
            continue
        out.append(_Entry(prompt, counter.count(prompt), out_tokens))
    if problems:
        raise InputError(problems)
    return out


def _sharegpt(path: Path, text: str, counter: TokenCounter) -> list[_Entry]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    out = []
    for item in data:
        turns = item.get("conversations") if isinstance(item, dict) else None
        if not isinstance(turns, list):
            continue
        # The first human turn and the reply after it; conversations without one are skipped (as vLLM does).
        for ask, answer in itertools.pairwise(turns):
            if (isinstance(ask, dict) and isinstance(answer, dict) and ask.get("from") == "human"
                    and answer.get("from") == "gpt" and str(ask.get("value", "")).strip()):
                reply = counter.count(str(answer.get("value", "")))
                out.append(_Entry(str(ask["value"]), counter.count(str(ask["value"])), max(1, reply)))
                break
    return out

