"""Validated settings: `gateway.yaml` overlaid by environment variables.

Every setting is declared once, on the dataclass field it fills (`sections.py`, and the top-level
ones on `Settings` in `model.py`): its environment variable, parser, default, one line of
documentation and its check; its path in gateway.yaml is the section and the attribute. To add
one, add that one `setting(...)` line, show it in gateway.example.yaml, and run `make reference`
(docs/configuration.md is generated from the declarations). A platform's own settings are
`Option`s of its catalog entry (`platforms/catalog.py`).

- `declare.py`: how a setting is declared (`setting`, the parsers, the checks)
- `table.py`: the declarations as one table (`FIELDS`); building and checking `Settings`
- `load.py`: gateway.yaml + environment -> Settings; `profiles.py`: named profiles
- `shipped.py`: the JSON settings file a deployment ships with its functions
- `reference.py`: docs/configuration.md
- `rules.py`: the domain's rules (a session store's reset policies) as the settings give them

Secrets are not settings: they are never read from `gateway.yaml`, never written by `to_env`
or into the shipped file; see `hermes_gateway.secrets`.
"""

from hermes_gateway.platforms.catalog import PLATFORM_NAMES as PLATFORMS
from hermes_gateway.settings.declare import Check, Setting
from hermes_gateway.settings.load import configured_paths, load_settings, load_settings_file, read_yaml
from hermes_gateway.settings.model import Settings
from hermes_gateway.settings.profiles import DEPLOYMENT_WIDE, MAX_PROFILES, NAMED_PROFILE
from hermes_gateway.settings.rules import rules_from_settings
from hermes_gateway.settings.sections import (
    BOT_POLICIES,
    LEASE_MARGIN_SECONDS,
    MEMORY_PROVIDERS,
    MODEL_CALL_LIMIT_SECONDS,
    OBSERVABILITY_TIERS,
    PROVIDERS,
    TOOL_NAMES,
    TURN_LIMIT_SECONDS,
    UNAUTHORIZED_DM_MODES,
    WORKFLOW_TYPES,
    AccessSettings,
    CompressionSettings,
    CronSettings,
    HooksSettings,
    IngressSettings,
    LimitSettings,
    MemorySettings,
    OperationsSettings,
    PlatformSettings,
    ProviderSettings,
    SessionSettings,
    ToolSettings,
    TurnSettings,
)
from hermes_gateway.settings.shipped import SETTINGS_FILE_ENV, load_shipped_settings, settings_json, write_settings_file
from hermes_gateway.settings.table import FIELDS, PROFILES_ENV, settings_config, settings_env

__all__ = [
    "BOT_POLICIES",
    "DEPLOYMENT_WIDE",
    "FIELDS",
    "LEASE_MARGIN_SECONDS",
    "MAX_PROFILES",
    "MEMORY_PROVIDERS",
    "MODEL_CALL_LIMIT_SECONDS",
    "NAMED_PROFILE",
    "OBSERVABILITY_TIERS",
    "PLATFORMS",
    "PROFILES_ENV",
    "PROVIDERS",
    "SETTINGS_FILE_ENV",
    "TOOL_NAMES",
    "TURN_LIMIT_SECONDS",
    "UNAUTHORIZED_DM_MODES",
    "WORKFLOW_TYPES",
    "AccessSettings",
    "Check",
    "CompressionSettings",
    "CronSettings",
    "HooksSettings",
    "IngressSettings",
    "LimitSettings",
    "MemorySettings",
    "OperationsSettings",
    "PlatformSettings",
    "ProviderSettings",
    "SessionSettings",
    "Setting",
    "Settings",
    "ToolSettings",
    "TurnSettings",
    "configured_paths",
    "load_settings",
    "load_settings_file",
    "load_shipped_settings",
    "read_yaml",
    "rules_from_settings",
    "settings_config",
    "settings_env",
    "settings_json",
    "write_settings_file",
]
