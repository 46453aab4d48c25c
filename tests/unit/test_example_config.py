"""gateway.example.yaml documents every setting, with its environment variable, and is valid."""

from __future__ import annotations

from pathlib import Path

from hermes_gateway.settings import FIELDS, configured_paths, load_settings, read_yaml

EXAMPLE = Path(__file__).resolve().parents[2] / "gateway.example.yaml"


def test_the_example_sets_every_setting_to_its_default() -> None:
    config = read_yaml(EXAMPLE)
    assert configured_paths(config, {}) == {f.path for f in FIELDS}
    assert load_settings(env={}, config=config) == load_settings(env={}, config={})


def test_the_example_names_every_environment_variable() -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    missing = [f.env for f in FIELDS if f.env not in text]
    assert missing == []
