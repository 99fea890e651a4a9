"""Reading, selecting and building the requests of replayed traces (Mooncake JSONL, Azure CSV)."""

from __future__ import annotations

import csv
import itertools
import json
from datetime import datetime
from pathlib import Path

import pytest

from sagellm.bench.client.trace import MOONCAKE_BLOCK_TOKENS, TraceOptions, load_trace, parse_window
from sagellm.bench.client.workload import Workload, WorkloadOptions
from sagellm.errors import InputError
from sagellm.planner import Payload

TRACES = Path(__file__).resolve().parents[2] / "fixtures" / "traces"
MOONCAKE = TRACES / "mooncake.jsonl"
AZURE = TRACES / "azure_conv.csv"


def mooncake_rows() -> list[dict]:
    return [json.loads(line) for line in MOONCAKE.read_text().splitlines() if line.strip()]


def azure_rows() -> list[dict]:
    with AZURE.open(newline="") as f:
        return list(csv.DictReader(f))


def trace_workload(path: Path, **options: object) -> Workload:
    return Workload(WorkloadOptions(trace=TraceOptions(path, **options)), Payload(1, 1))  # type: ignore[arg-type]


def test_a_mooncake_trace_is_read_with_its_arrivals_in_seconds_and_its_lengths() -> None:
    rows = mooncake_rows()
    trace = load_trace(TraceOptions(MOONCAKE))

    assert trace.format == "mooncake" and trace.rows_in_file == len(rows) == len(trace.rows)
    assert trace.arrivals_s == pytest.approx([(r["timestamp"] - rows[0]["timestamp"]) / 1000 for r in rows])
    assert [(t.input_tokens, t.output_tokens, list(t.hash_ids)) for t in trace.rows] == \
        [(r["input_length"], r["output_length"], r["hash_ids"]) for r in rows]


def test_an_azure_trace_is_read_with_its_wall_clock_times_as_offsets() -> None:
    rows = azure_rows()
    trace = load_trace(TraceOptions(AZURE))
    zero = datetime.fromisoformat(rows[0]["TIMESTAMP"][:26])  # microseconds: the file carries one more digit

    assert trace.format == "azure" and len(trace.rows) == len(rows)
    assert trace.arrivals_s == pytest.approx(
        [(datetime.fromisoformat(r["TIMESTAMP"][:26]) - zero).total_seconds() for r in rows], abs=1e-6)
    assert [(t.input_tokens, t.output_tokens) for t in trace.rows] == \
        [(int(r["ContextTokens"]), int(r["GeneratedTokens"])) for r in rows]


def test_speed_compresses_arrivals_and_raises_the_mean_rate() -> None:
    once, twice = load_trace(TraceOptions(MOONCAKE)), load_trace(TraceOptions(MOONCAKE, speed=2))
    assert twice.arrivals_s == pytest.approx([t / 2 for t in once.arrivals_s])
    assert twice.rate == pytest.approx(2 * once.rate)
    assert once.rate == pytest.approx((len(once.rows) - 1) / once.arrivals_s[-1])


def test_a_window_and_a_count_select_the_requests_and_arrivals_start_at_the_first_selected() -> None:
    full = load_trace(TraceOptions(AZURE))
    start, end = 2.0, 6.0
    inside = [r for r in full.rows if start <= r.timestamp_s < end]
    part = load_trace(TraceOptions(AZURE, requests=3, window_s=(start, end)))

    assert part.rows == tuple(inside[:3]) and part.rows_in_file == len(full.rows)
    assert part.arrivals_s[0] == 0 and part.arrivals_s[1] == pytest.approx(inside[1].timestamp_s - inside[0].timestamp_s)
    assert part.describe().rows == 3 and part.describe().window_s == (start, end)


def test_mooncake_prompts_share_the_text_of_shared_blocks_and_nothing_else() -> None:
    w = trace_workload(MOONCAKE)
    rows = w.trace.rows if w.trace else ()
    words = [w.request(i).prompt.split() for i in range(len(rows))]
    assert [len(x) for x in words] == [r.input_tokens for r in rows]  # one word, one token (no tokenizer)
    b = MOONCAKE_BLOCK_TOKENS
    pairs_sharing = 0
    for i, j in itertools.combinations(range(len(rows)), 2):
        shared = 0
        while shared < min(len(rows[i].hash_ids), len(rows[j].hash_ids)) and \
                rows[i].hash_ids[shared] == rows[j].hash_ids[shared]:
            shared += 1
        common = 0
        for x, y in zip(words[i], words[j], strict=False):
            if x != y:
                break
            common += 1
        pairs_sharing += shared >= 2
        assert common >= min(shared * b, len(words[i]), len(words[j])), (i, j)
        if not shared:  # no block in common: they part within the first words (chance agreement is rare)
            assert common < 8, (i, j)
        elif shared < min(len(rows[i].hash_ids), len(rows[j].hash_ids)):
            assert common < shared * b + 8, (i, j)
    assert pairs_sharing > 10  # the fixture has shared chains to test


def test_prompts_are_the_same_for_the_same_seed_and_differ_for_another() -> None:
    a, b, other = trace_workload(MOONCAKE), trace_workload(MOONCAKE), \
        Workload(WorkloadOptions(trace=TraceOptions(MOONCAKE), seed=1), Payload(1, 1))
    assert a.request(5).prompt == b.request(5).prompt != other.request(5).prompt


def test_azure_prompts_are_unique_and_each_request_keeps_its_lengths() -> None:
    w = trace_workload(AZURE)
    rows = azure_rows()
    requests = [w.request(i) for i in range(len(rows))]
    assert [(r.input_tokens, r.max_new_tokens) for r in requests] == \
        [(int(r["ContextTokens"]), int(r["GeneratedTokens"])) for r in rows]
    assert [w.sizes(i) for i in range(len(rows))] == [(r.input_tokens, r.max_new_tokens) for r in requests]
    openings = {tuple(r.prompt.split()[:8]) for r in requests}
    assert len(openings) == len(requests)


def test_the_workload_of_a_trace_is_sized_and_recorded_from_it() -> None:
    w = trace_workload(MOONCAKE, speed=3)
    rows = mooncake_rows()
    assert w.longest() == (max(r["input_length"] for r in rows), max(r["output_length"] for r in rows))
    assert w.payload() == Payload(round(sum(r["input_length"] for r in rows) / len(rows)),
                                  round(sum(r["output_length"] for r in rows) / len(rows)))
    record = w.describe("tgi")
    assert record.prompts == "trace" and record.trace is not None
    assert (record.trace.file, record.trace.format, record.trace.rows, record.trace.speed) == \
        (str(MOONCAKE), "mooncake", len(rows), 3)


def test_a_level_replays_the_trace_from_its_first_request() -> None:
    w = trace_workload(AZURE)
    w.issued = 5
    w.replay_from_start()
    again = w.next()
    assert w.issued == len(azure_rows()) + 1
    # Row 0's lengths again; its unique words are drawn afresh (a repeat must not find them in a prefix cache).
    assert (again.input_tokens, again.max_new_tokens) == w.sizes(0) and again.prompt != w.request(0).prompt


def test_a_trace_does_not_mix_with_drawn_lengths_or_a_dataset() -> None:
    with pytest.raises(InputError) as exc:
        Workload(WorkloadOptions(trace=TraceOptions(MOONCAKE), input_tokens="512"), Payload(1, 1))
    assert exc.value.messages == [("WorkloadOptions.input_tokens: not with WorkloadOptions.trace (the trace gives "
                                   "every request's lengths and shared blocks)")]


GOOD_MOONCAKE = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}'


@pytest.mark.parametrize(("second_line", "says"), [
    ("{not json", "not JSON"),
    ('[1, 2]', "not a JSON object"),
    ('{"timestamp": -5, "input_length": 10, "output_length": 5}', "timestamp: -5 must be milliseconds"),
    ('{"timestamp": "soon", "input_length": 10, "output_length": 5}', "timestamp: 'soon'"),
    ('{"timestamp": 10, "input_length": 10}', "output_length: None must be a whole number of tokens"),
    ('{"timestamp": 10, "input_length": 0, "output_length": 5}', "input_length: 0 must be a whole number"),
    ('{"timestamp": 10, "input_length": 10.5, "output_length": 5}', "input_length: 10.5"),
    ('{"timestamp": 10, "input_length": 600, "output_length": 5, "hash_ids": [1, "x"]}', "hash_ids: [1, 'x']"),
    ('{"timestamp": 10, "input_length": 600, "output_length": 5, "hash_ids": [1, 2, 3]}',
     "3 blocks of 512 tokens do not fit in input_length 600"),
])
def test_a_bad_mooncake_row_fails_in_one_line_naming_file_line_and_the_fix(tmp_path: Path, second_line: str,
                                                                        says: str) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text(f"{GOOD_MOONCAKE}\n{second_line}\n{GOOD_MOONCAKE}\n")
    with pytest.raises(InputError) as exc:
        load_trace(TraceOptions(path))
    [message] = exc.value.messages
    assert message.startswith(f"{path}:2: ") and says in message and "\n" not in message
    assert "e.g." in message or "at most" in message  # the shape a good line has


@pytest.mark.parametrize(("row", "says"), [
    ("yesterday,10,5", "TIMESTAMP: 'yesterday' is not a date and time"),
    ("2023-11-16 18:15:47.0000000,ten,5", "ContextTokens: 'ten' must be a whole number"),
    ("2023-11-16 18:15:47.0000000,10,0", "GeneratedTokens: '0' must be a whole number"),
    ("2023-11-16 18:15:47.0000000,10", "2 columns where 3 are needed"),
    ("2023-11-16 18:15:40.0000000,10,5", "its timestamp is before line 2's"),
])
def test_a_bad_azure_row_fails_in_one_line_naming_file_line_and_the_fix(tmp_path: Path, row: str, says: str) -> None:
    path = tmp_path / "trace.csv"
    path.write_text(f"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,4808,10\n{row}\n")
    with pytest.raises(InputError) as exc:
        load_trace(TraceOptions(path))
    [message] = exc.value.messages
    assert message.startswith(f"{path}:3: ") and says in message and "\n" not in message


def test_a_file_of_neither_format_or_an_empty_selection_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    path.write_text("time,prompt,output\n1,2,3\n")
    with pytest.raises(InputError) as exc:
        load_trace(TraceOptions(path))
    [message] = exc.value.messages
    assert message.startswith(f"WorkloadOptions.trace: {path}:1: neither a Mooncake trace")
    with pytest.raises(InputError) as exc:
        load_trace(TraceOptions(AZURE, window_s=(1000, 2000)))
    assert "holds no request in the window 1000-2000 s" in exc.value.messages[0]


@pytest.mark.parametrize("text", ["10", "5-2", "a-b", "-1-3"])
def test_a_window_must_be_start_below_end(text: str) -> None:
    with pytest.raises(InputError, match="--trace-window"):
        parse_window(text, "--trace-window")
    assert parse_window("0-600", "--trace-window") == (0.0, 600.0)


def test_speed_and_count_must_be_positive() -> None:
    with pytest.raises(InputError) as exc:
        TraceOptions(MOONCAKE, speed=0, requests=0)
    assert [m.split(":")[0] for m in exc.value.messages] == ["TraceOptions.speed", "TraceOptions.requests"]


def test_the_2024_azure_files_time_zone_and_a_byte_order_mark_are_read(tmp_path: Path) -> None:
    path = tmp_path / "AzureLLMInferenceTrace_conv_1week.csv"
    path.write_text("\ufeffTIMESTAMP,ContextTokens,GeneratedTokens\r\n2024-05-10 00:00:00.009930+00:00,374,44\r\n"
                    "2024-05-10 00:00:01.509930+00:00,396,109\r\n", encoding="utf-8")
    trace = load_trace(TraceOptions(path))
    assert trace.format == "azure" and trace.arrivals_s == pytest.approx((0.0, 1.5))
    assert [(r.input_tokens, r.output_tokens, r.line) for r in trace.rows] == [(374, 44, 2), (396, 109, 3)]
