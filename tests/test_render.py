"""The report printed as written when stdout is not a terminal; in a terminal, tables and image links whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from sagellm.render import markdown_blocks, print_report

REPORT = ("**PASS** — fine\n\n# title\n\n- a [bracketed] word\n\n![latency vs throughput](curve.png)\n\n"
          "| level | " + " | ".join(f"column {i}" for i in range(30)) + " |\n|---:|" + "---:|" * 30 + "\n")


def test_piped_the_report_is_the_markdown_as_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "report.md").write_text(REPORT)

    print_report(tmp_path)

    out = capsys.readouterr().out
    assert out.startswith(REPORT)  # markup kept, no line wrapped, the image link whole
    assert "![latency vs throughput](curve.png)" in out and "- a [bracketed] word" in out


def test_in_a_terminal_tables_and_image_links_are_printed_verbatim_and_prose_rendered() -> None:
    blocks = markdown_blocks(REPORT)

    verbatim = [block for block, whole in blocks if whole]
    assert verbatim[0] == "![latency vs throughput](curve.png)"
    assert verbatim[1].splitlines()[0].startswith("| level | column 0 |") and len(verbatim[1].splitlines()) == 2
    assert all(not block.startswith(("|", "![")) for block, whole in blocks if not whole)


def test_a_plan_piped_keeps_its_image_uri_on_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from sagellm.profiles import resolve
    from sagellm.render import print_plan

    plan = resolve("max-throughput", "meta-llama/Llama-2-7b-hf", "ml.g5.2xlarge")

    print_plan(plan)

    assert f"  image {plan.primary.image_uri}\n" in capsys.readouterr().out
