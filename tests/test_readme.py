"""The README: the two set-up commands it promises, and links that lead somewhere."""

import re
from pathlib import Path

from markdown.extensions.toc import slugify

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def headings(page: Path) -> set[str]:
    """The anchors MkDocs gives a page's headings."""
    return {slugify(line.lstrip("#").strip().replace("`", ""), "-")
            for line in page.read_text(encoding="utf-8").splitlines() if line.startswith("#")}


def test_the_readme_opens_with_the_two_make_commands() -> None:
    assert "make demo   # bench the max-throughput profile" in README
    assert "make test   # the test suite (what CI runs through .ci/run)" in README
    assert README.index("make demo") < README.index("## 1. Deploy with CDK")


def test_every_relative_link_in_the_readme_leads_to_a_file_and_heading() -> None:
    broken = []
    for target in LINK.findall(README):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        page = ROOT / path
        if not page.is_file() or (anchor and anchor not in headings(page)):
            broken.append(target)

    assert broken == []


# A pin as the README writes one: `{kind: tgi, version: 3.3.6}` (profile YAML) or `lmi (0.38.0)` (prose).
PIN = re.compile(r"kind: ([a-z-]+), version: ([\w.-]+)\}|(?<![\w-])([a-z][a-z-]*) \((\d+\.\d+\.\d+)\)")


def test_every_engine_version_the_readme_states_is_the_one_sagellm_pins() -> None:
    from sagellm.engines import ENGINES
    from sagellm.profiles.schema import Container

    stated = [(m[1] or m[3], m[2] or m[4]) for m in PIN.finditer(README) if (m[1] or m[3]) in ENGINES]
    assert {kind for kind, _ in stated} >= {"tgi", "lmi"}  # the profile example names both: nothing went unread
    assert [(kind, version) for kind, version in stated if version != ENGINES[kind].pinned] == []
    default = next(line for line in README.splitlines() if "# the default pin" in line)
    assert f"kind: {Container().kind}," in default
