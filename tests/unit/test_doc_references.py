"""Every section the code and the docs cite exists, and docs/behaviour.md's session-key examples hold.

A citation is `BEHAVIOUR \u00a7n` (docs/behaviour.md), `ARCHITECTURE \u00a7n` (docs/architecture.md) or
`PLATFORMS \u00a7n` (the numbered notes of docs/platforms/README.md); `n` may have subsections
(`\u00a73.9`). A bare `\u00a7n` continues the document named last before it in the same file, and a
standard's own numbering (`RFC 8032 \u00a77.1`) is not ours to check. A citation resolves when the
cited document has a heading numbered `n`. This file writes the section sign as an escape so
that its own examples are not read as citations.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from hermes_gateway.domain.session_key import build_session_key
from hermes_gateway.domain.source import SessionSource

ROOT = Path(__file__).resolve().parents[2]
SIGN = "\u00a7"
DOCUMENTS = {
    "BEHAVIOUR": ROOT / "docs" / "behaviour.md",
    "ARCHITECTURE": ROOT / "docs" / "architecture.md",
    "PLATFORMS": ROOT / "docs" / "platforms" / "README.md",
}
SOURCE_DIRS = ("layers", "functions", "local", "infra", "bench", "relays", "tests", "docs")
SUFFIXES = (".py", ".md", ".yaml", ".json")
SKIPPED_DIRS = frozenset({".venv", "node_modules", "cdk.out", "__pycache__", ".git"})

# A citation: an optional name right before the sign (a word of capitals, maybe `.md`, or
# `RFC <number>`), then the section number.
_CITATION = re.compile(
    r"(?:(?P<rfc>\bRFC\s?\d+)\s+|(?P<name>\b[A-Z][A-Z_]{2,})(?P<md>\.md)?\s+)?" + SIGN + r"\s?(?P<number>\d+(?:\.\d+)*)"
)
_NUMBERED_HEADING = re.compile(r"^#{1,6}\s+(\d+(?:\.\d+)*)\.?\s+\S", re.MULTILINE)


@dataclass(frozen=True)
class Citation:
    path: str
    line: int
    document: str | None  # None: a bare number with no document named before it
    number: str
    problem: str = ""


def citations(text: str, path: str = "<text>") -> list[Citation]:
    """The citations in one file, each with the document it refers to (see the module doc)."""
    found: list[Citation] = []
    current: str | None = None
    for match in _CITATION.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        number, name = match["number"], match["name"]
        problem = ""
        if match["rfc"]:
            current = "RFC"
        elif name is not None:
            if name not in DOCUMENTS:
                problem = f"{name} is not one of {', '.join(DOCUMENTS)}"
            elif match["md"]:
                problem = f"write `{name} {SIGN}{number}` (the name without .md)"
            current = name
        elif current is None:
            problem = "a bare section number with no document named before it in the file"
        found.append(Citation(path, line, current, number, problem))
    return found


def numbered_headings(text: str) -> set[str]:
    return set(_NUMBERED_HEADING.findall(text))


def _files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "gateway.example.yaml"]
    for top in SOURCE_DIRS:
        for path in sorted((ROOT / top).rglob("*")):
            parts = set(path.relative_to(ROOT).parts)
            if path.suffix in SUFFIXES and path.is_file() and not parts & SKIPPED_DIRS:
                files.append(path)
    return files


def _all_citations() -> list[Citation]:
    found: list[Citation] = []
    for path in _files():
        text = path.read_text(encoding="utf-8")
        if SIGN in text:
            found += citations(text, str(path.relative_to(ROOT)))
    return found


def test_every_citation_names_a_numbered_section_of_its_document() -> None:
    headings = {name: numbered_headings(path.read_text(encoding="utf-8")) for name, path in DOCUMENTS.items()}
    found = _all_citations()
    broken = []
    for cited in found:
        if cited.document == "RFC":
            continue
        if cited.problem:
            broken.append(f"{cited.path}:{cited.line}: {cited.problem}")
        elif cited.document is not None and cited.number not in headings[cited.document]:
            where = DOCUMENTS[cited.document].relative_to(ROOT)
            name = f"{cited.document} {SIGN}{cited.number}"
            broken.append(f"{cited.path}:{cited.line}: {name}: no such section in {where}")
    assert not broken, "\n".join(broken)
    # The scan itself works: the code cites the behaviour rules dozens of times.
    assert sum(c.document == "BEHAVIOUR" for c in found) > 50


def test_the_behaviour_document_has_its_ten_sections() -> None:
    assert {str(n) for n in range(1, 11)} <= numbered_headings(DOCUMENTS["BEHAVIOUR"].read_text(encoding="utf-8"))


# -- the reader itself -----------------------------------------------------------------------


def test_a_bare_number_continues_the_document_named_before_it() -> None:
    text = f"Gateway commands (BEHAVIOUR {SIGN}9).\nTiers ({SIGN}4) and (PLATFORMS {SIGN}3.9 / {SIGN}15)."
    assert [(c.document, c.number, c.problem) for c in citations(text)] == [
        ("BEHAVIOUR", "9", ""),
        ("BEHAVIOUR", "4", ""),
        ("PLATFORMS", "3.9", ""),
        ("PLATFORMS", "15", ""),
    ]


def test_a_standard_numbering_is_not_ours_and_does_not_take_over() -> None:
    text = f"RFC 8032 {SIGN}7.1 test 1 (PLATFORMS {SIGN}15), then RFC 6749 {SIGN}4.4"
    assert [(c.document, c.number) for c in citations(text)] == [("RFC", "7.1"), ("PLATFORMS", "15"), ("RFC", "4.4")]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (f"see {SIGN}3", "no document named"),
        (f"STYLE {SIGN}2", "STYLE is not one of"),
        (f"`BEHAVIOUR.md` {SIGN}4", "no document named"),
        (f"BEHAVIOUR.md {SIGN}4", "without .md"),
    ],
)
def test_unclear_citations_are_refused(text: str, problem: str) -> None:
    (cited,) = citations(text)
    assert problem in cited.problem


def test_numbered_headings_at_any_level() -> None:
    text = "# Title\n## 1. One\n### 3.9 Vectors\n## Unnumbered\nnot a heading 2. here\n"
    assert numbered_headings(text) == {"1", "3.9"}


# -- docs/behaviour.md section 2: the worked examples ----------------------------------------

_EXAMPLE_ROW = re.compile(r"^\| `(platform=[^`]+)` \| (?:`([^`]+)`)? *\| `([^`]+)` \|$", re.MULTILINE)


def _fields(text: str | None) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in (text or "").split())


def _examples() -> list[tuple[str, str, str]]:
    text = DOCUMENTS["BEHAVIOUR"].read_text(encoding="utf-8")
    section = text.split("## 2. ", 1)[1].split("\n## 3. ", 1)[0]
    return [(source, settings or "", key) for source, settings, key in _EXAMPLE_ROW.findall(section)]


def test_the_document_has_its_worked_examples() -> None:
    assert len(_examples()) >= 20


@pytest.mark.parametrize(("source", "settings", "key"), _examples())
def test_worked_example(source: str, settings: str, key: str) -> None:
    options: dict[str, object] = {
        name: {"true": True, "false": False}.get(value, value) for name, value in _fields(settings).items()
    }
    built = build_session_key(SessionSource(**_fields(source)), **options)  # type: ignore[arg-type]
    assert built == key
