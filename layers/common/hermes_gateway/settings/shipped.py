"""The settings file a deployment ships with its functions, and how a function reads it.

At synth time the validated settings are written as JSON (`Settings.to_config`: the settings not
at their default, and every named profile's own) into a small layer of their own, which every
function mounts at /opt; `GATEWAY_SETTINGS_FILE` names the file. A function reads it once per
cold start, through the same loader as gateway.yaml, the environment still overriding it
setting by setting (local overrides, tests). The environment keeps only names, ARNs and what
differs per function: Lambda allows 4 KB of it, which two profiles on every platform outgrow.

Secrets are never settings, so never in the file (`hermes_gateway.secrets`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from hermes_gateway.errors import ConfigError
from hermes_gateway.settings.load import load_settings
from hermes_gateway.settings.model import Settings
from hermes_gateway.settings.table import settings_config

SETTINGS_FILE_ENV = "GATEWAY_SETTINGS_FILE"
# Where the file is in the settings layer, and so in a function (a layer is unpacked into /opt).
LAYER_FILE = "hermes-gateway/settings.json"
SHIPPED_PATH = f"/opt/{LAYER_FILE}"


def settings_json(settings: Settings) -> str:
    return json.dumps(settings_config(settings, changed_only=True), indent=1, ensure_ascii=False) + "\n"


def write_settings_file(settings: Settings, path: Path | str) -> None:
    Path(path).write_text(settings_json(settings), encoding="utf-8")


def load_shipped_settings(env: Mapping[str, str]) -> Settings:
    """A function's settings: the file `GATEWAY_SETTINGS_FILE` names (none: defaults), overlaid
    by the environment."""
    path = env.get(SETTINGS_FILE_ENV)
    if not path:
        return load_settings(env=env, config={}, source="environment")
    try:
        config = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path} ({SETTINGS_FILE_ENV}): cannot read the settings file: {exc.strerror}") from None
    except ValueError:
        raise ConfigError(f"{path} ({SETTINGS_FILE_ENV}): not valid JSON") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{path} ({SETTINGS_FILE_ENV}): the top level must be a mapping of settings")
    return load_settings(env=env, config=config, source=path)
