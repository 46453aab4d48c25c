"""gateway.example.yaml documents every setting, with its environment variable, and is valid.

The access keys every platform shares are shown in full for Telegram only; the other platforms
list their switch, API address and own options (the example says so)."""

from __future__ import annotations

from pathlib import Path

from hermes_gateway.platforms import catalog
from hermes_gateway.settings import FIELDS, PlatformSettings, configured_paths, load_settings, read_yaml
from hermes_gateway.settings.table import declared

EXAMPLE = Path(__file__).resolve().parents[2] / "gateway.example.yaml"


def documented(path: str) -> bool:
    """Whether the example must carry this field."""
    head, _, rest = path.partition(".")
    if head != "platforms":
        return True
    platform, _, attr = rest.partition(".")
    spec = catalog.BY_NAME[platform]
    shared = attr in {name for name, _ in declared(PlatformSettings)}
    if platform == "telegram" or not shared or attr == "enabled":
        return True
    return attr == "api_base_url" and spec.api_base_url is not None


def test_the_example_sets_its_settings_to_their_defaults() -> None:
    config = read_yaml(EXAMPLE)
    assert configured_paths(config, {}) >= {f.path for f in FIELDS if documented(f.path)}
    assert load_settings(env={}, config=config) == load_settings(env={}, config={})


def test_the_example_names_every_environment_variable_it_must() -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    missing = [f.env for f in FIELDS if documented(f.path) and f.env not in text]
    assert missing == []


def test_the_example_names_every_platform_secret() -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    missing = [s for spec in catalog.CATALOG if not spec.local_only for s in spec.secrets if s not in text]
    assert missing == []
