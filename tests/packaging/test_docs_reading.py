"""The docs read in one pass: few sentences over 40 words, no dead link, an index.

Run it as a script to see the share of long sentences per page and the worst offenders:
`python tests/packaging/test_docs_reading.py [-v [N]]`."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
LONG = 40  # words
MAX_SHARE = 0.05
# Pages another person is writing: a link to one is allowed until the page exists.
BEING_WRITTEN = {DOCS / "states.md"}

_FENCE = re.compile(r"^```.*?^```[^\n]*$", re.S | re.M)
_SEPARATOR = re.compile(r"\|?[\s:|-]+\|?")
_ITEM = re.compile(r"^([-*+]|\d+[.)])\s+")
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]*_]*\s+(?=[A-Z0-9\"'(\[*_`]|CODE)")


def _prose_units(text: str) -> list[str]:
    """Paragraphs, list items and table cells, without code blocks and headings."""
    text = re.sub(r"<!--.*?-->", "", _FENCE.sub("", text), flags=re.S)
    units: list[str] = []
    para: list[str] = []

    def flush() -> None:
        if para:
            units.append(" ".join(para))
            para.clear()

    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            flush()
        elif s.startswith("|"):
            flush()
            if not _SEPARATOR.fullmatch(s):
                units += re.split(r"(?<!\\)\|", s.strip("|"))
        else:
            if _ITEM.match(s):
                flush()
                s = _ITEM.sub("", s)
            para.append(s.lstrip("> "))
    flush()
    return units


def sentences(text: str) -> list[str]:
    """The prose's sentences; an inline code span counts as one word, a link as its text."""
    found = []
    for unit in _prose_units(text):
        unit = re.sub(r"`[^`]*`", "CODE", unit)
        unit = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", unit)
        unit = re.sub(r"<https?://[^>]*>", "URL", unit)
        found += [s.strip() for s in _SENTENCE_END.split(unit) if re.search(r"\w", s)]
    return found


def words(sentence: str) -> int:
    return len(sentence.split())


def _long_share(pages: list[Path]) -> tuple[float, list[tuple[str, str]]]:
    every = [(p.name, s) for p in pages for s in sentences(p.read_text())]
    long = [(name, s) for name, s in every if words(s) > LONG]
    return len(long) / len(every), long


@pytest.mark.parametrize("pages", [PAGES, PAGES[:1]], ids=["README+docs", "README"])
def test_few_long_sentences(pages: list[Path]) -> None:
    share, long = _long_share(pages)
    worst = sorted(long, key=lambda x: -words(x[1]))[:5]
    assert share <= MAX_SHARE, (f"{share:.1%} of sentences over {LONG} words; worst: "
                                + "; ".join(f"{n}: {s[:80]}…" for n, s in worst))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text.replace("`", ""))
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in _FENCE.sub("", page.read_text()).splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(page: Path) -> list[str]:
    text = re.sub(r"`[^`\n]*`", "", _FENCE.sub("", page.read_text()))
    targets = re.findall(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", text)
    targets += re.findall(r"^\s*\[[^\]]+\]:\s*(\S+)", text, re.M)
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def dead_links(pages: list[Path]) -> list[str]:
    dead = []
    for page in pages:
        for target in links(page):
            path, _, fragment = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if file in BEING_WRITTEN and not file.exists():
                continue
            if not file.exists():
                dead.append(f"{page.name}: {target} (no such file)")
            elif fragment and file.suffix == ".md" and fragment not in anchors(file):
                dead.append(f"{page.name}: {target} (no such heading)")
    return dead


def test_every_relative_link_resolves() -> None:
    assert dead_links(PAGES) == []


def test_the_link_check_sees_a_dead_link(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n\n## A `code` heading, too\n")
    page.write_text("[a](other.md#a-code-heading-too) [b](missing.md) [c](other.md#nope)\n"
                    "`[d](in-code.md)` [e](https://example.com/x.md)\n")
    assert dead_links([page]) == ["page.md: missing.md (no such file)",
                                  "page.md: other.md#nope (no such heading)"]


def test_readme_links_the_index() -> None:
    assert "docs/index.md" in links(ROOT / "README.md")


def test_no_performance_history_under_docs() -> None:
    assert list(DOCS.rglob("performance-history.md")) == []


if __name__ == "__main__":
    for group in (PAGES[:1], PAGES):
        share, long = _long_share(group)
        print(f"{'README' if len(group) == 1 else 'README+docs'}: {len(long)} of "
              f"{sum(len(sentences(p.read_text())) for p in group)} over {LONG} words "
              f"({share:.1%})")
    for page in PAGES:
        share, long = _long_share([page])
        print(f"  {page.relative_to(ROOT)}: {len(long)} long ({share:.1%})")
    if "-v" in sys.argv:
        count = int(sys.argv[-1]) if sys.argv[-1].isdigit() else 30
        for name, s in sorted(_long_share(PAGES)[1], key=lambda x: -words(x[1]))[:count]:
            print(f"--- {name} ({words(s)}): {s}")
    for line in dead_links(PAGES):
        print("dead link:", line)
