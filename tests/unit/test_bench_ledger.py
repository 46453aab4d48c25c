"""bench/ledger.py writes its ledger into docs/cost.md's `## One message` section, one `### label`
part per ledger, and leaves every other section as it was."""

from __future__ import annotations

from pathlib import Path

from bench.ledger import write

DOC = "# What it costs\n\n## Idle\n\nidle text\n\n## One message\n\nintro\n\n## Faults\n\nfault text\n"


def test_a_ledger_goes_under_its_label_and_a_second_run_replaces_only_it(tmp_path: Path) -> None:
    doc = tmp_path / "cost.md"
    doc.write_text(DOC, encoding="utf-8")
    write(doc, "### before\n\nold ledger\n", "before")
    write(doc, "### after\n\nnew ledger\n", "after")
    write(doc, "### after\n\nnewer ledger\n", "after")
    text = doc.read_text(encoding="utf-8")
    assert text.startswith("# What it costs\n\n## Idle\n\nidle text\n\n## One message\n\nintro\n")
    assert text.index("old ledger") < text.index("newer ledger") < text.index("## Faults")
    assert "new ledger\n" not in text.replace("newer ledger", "")
    assert text.endswith("## Faults\n\nfault text\n")


def test_a_file_without_the_section_gets_it_at_the_end(tmp_path: Path) -> None:
    doc = tmp_path / "cost.md"
    doc.write_text("# What it costs\n\n## Idle\n\nidle text\n", encoding="utf-8")
    write(doc, "### before\n\nledger\n", "before")
    assert doc.read_text(encoding="utf-8").endswith("## One message\n\n### before\n\nledger\n")
