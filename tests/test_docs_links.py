"""The docs stand inside the repository: no citation of files it does not ship (an outside
``DESIGN.md`` or ``reference/`` notes), and every relative link of the Markdown docs resolves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# what a reader of the repository opens: code, tests, benchmarks, docs and the README
SOURCES = sorted(
    p
    for pattern in ("src/**/*.py", "tests/**/*.py", "benchmarks/**/*.py", "docs/**/*.md", "README.md", "results/*.md")
    for p in ROOT.glob(pattern)
    if p.name != Path(__file__).name
)
OUTSIDE = re.compile(r"\bDESIGN\.md\b|\breference/[\w.-]+\.md\b")
# [text](target) and ![alt](target), not inside inline code
LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
MARKDOWN = sorted([*ROOT.glob("docs/**/*.md"), ROOT / "README.md", *ROOT.glob("results/*.md")])


def test_sources_are_found():
    assert any(p.suffix == ".py" for p in SOURCES) and any(p.suffix == ".md" for p in SOURCES)


def test_nothing_cites_design_notes_outside_the_repository():
    found = [
        f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
        for p in SOURCES
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), start=1)
        if OUTSIDE.search(line)
    ]
    assert not found, "citations of files outside the repository:\n" + "\n".join(found)


@pytest.mark.parametrize("doc", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_of_the_docs_resolve(doc):
    text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.S)  # code blocks
    text = re.sub(r"`[^`\n]*`", "", text)  # inline code
    broken = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL (http:, mailto:) or an anchor in the same page
        path = target.split("#", 1)[0]
        if not (doc.parent / path).exists():
            broken.append(target)
    assert not broken, f"{doc.relative_to(ROOT)}: links that do not resolve: {broken}"
