"""docs/configuration.md is the settings model's own reference, regenerated, never edited by hand."""

from __future__ import annotations

from pathlib import Path

from hermes_gateway.settings import FIELDS
from hermes_gateway.settings.reference import reference

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_the_reference_is_up_to_date() -> None:
    assert DOC.read_text(encoding="utf-8") == reference(), "run: make reference"


def test_it_names_every_setting() -> None:
    text = reference()
    assert all(f"`{f.env}`" in text for f in FIELDS)
