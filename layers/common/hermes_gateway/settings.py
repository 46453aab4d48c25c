"""Validated settings: `gateway.yaml` overlaid by environment variables.

One table (`FIELDS`) names every setting once: its place in `gateway.yaml`, its environment
variable, its type and default. At synth time the CDK app loads `gateway.yaml` and hands each
function the resolved values as those same environment variables (`Settings.to_env`), so a
Lambda builds its settings from the environment alone, once, at cold start.

Secrets are not settings: they are never read from `gateway.yaml` and never written by
`to_env`; see `hermes_gateway.secrets`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hermes_gateway.errors import ConfigError, UnknownProfile
from hermes_gateway.platforms import catalog
from hermes_gateway.resources import INBOUND_QUEUE, SECRET_NAMES

PROVIDERS = ("echo", "openai", "bedrock")
WORKFLOW_TYPES = ("express", "standard")
MODEL_CALL_LIMIT_SECONDS = 80  # the CallModel task may run 90 s (infra/statemachines/turn.asl.json)
TURN_LIMIT_SECONDS = 300  # an Express execution's longest run
LEASE_MARGIN_SECONDS = 60  # a turn's lease outlives its time limit by this much
BUSY_RETRY_CAP_SECONDS = 60


def busy_retry_delay(base_seconds: int, lease_age_seconds: float) -> int:
    """How long a message for a busy session waits before its next try: `busy_retry_seconds`
    while the running turn is young (most turns are short, so a burst is answered quickly), then
    a quarter of the turn's age, capped, so a long turn is waited out in few receives."""
    return int(min(BUSY_RETRY_CAP_SECONDS, max(base_seconds, lease_age_seconds / 4)))


def busy_patience_seconds(base_seconds: int, receives: int) -> float:
    """How long a message can wait for a busy session before the queue dead-letters it."""
    waited = 0.0
    for _ in range(receives - 1):
        waited += busy_retry_delay(base_seconds, waited)
    return waited


_STAGE = re.compile(r"^[a-z][a-z0-9-]{0,19}$")
_PROFILE = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
# A named profile is a URL segment (`/p/<name>/webhooks/...`) and a secret's suffix (`NAME__<NAME>`).
NAMED_PROFILE = re.compile(r"^[a-z][a-z0-9_]{0,29}$")
PROFILES_ENV = "GATEWAY_PROFILES"
MAX_PROFILES = 10
# What one deployment holds once, for every profile: its name and clock, the webhook limits, one
# tick, the hooks and the bus, the workflow and its lease, and the external memory service.
_DEPLOYMENT_WIDE = (
    "stage", "time_zone", "profile", "ingress.", "operations.", "cron.", "hooks.", "turns.workflow_type",
    "sessions.turn_timeout_seconds", "sessions.busy_retry_seconds", "sessions.route_max_idle_days",
    "memory.external", "memory.honcho_",
)  # fmt: skip


def _parse_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {raw!r}")


def _parse_int(raw: Any) -> int:
    if isinstance(raw, bool):
        raise ValueError(f"expected a whole number, got {raw!r}")
    try:
        return int(str(raw).strip())
    except ValueError:
        raise ValueError(f"expected a whole number, got {raw!r}") from None


def _parse_list(raw: Any) -> tuple[str, ...]:
    """A YAML list, or a comma-separated string as environment variables carry it. An entry may
    not hold a comma or white space itself: the environment form could not carry it intact."""
    if raw is None:
        return ()
    if isinstance(raw, list | tuple):
        items = [str(item).strip() for item in raw]
        for item in items:
            if "," in item or any(c.isspace() for c in item):
                raise ValueError(f"list entry {item!r} may not contain a comma or white space")
    else:
        items = [item.strip() for item in str(raw).split(",")]
    return tuple(item for item in items if item)


_GROUP_MAP_RESERVED = re.compile(r"[;=,\s]")


def _parse_group_map(raw: Any) -> dict[str, tuple[str, ...]]:
    """Group chat id -> the sender ids allowed in it. YAML: a mapping of lists; environment:
    `chatA=user1,user2;chatB=user3`. Ids may not hold `;`, `=`, `,` or white space."""
    if raw is None or raw == "":
        return {}
    if isinstance(raw, Mapping):
        pairs = [(str(chat).strip(), _parse_list(users)) for chat, users in raw.items()]
    elif isinstance(raw, str):
        pairs = []
        for part in filter(None, (p.strip() for p in raw.split(";"))):
            chat, sep, listed = part.partition("=")
            if not sep:
                raise ValueError(f"expected chat=user1,user2 in {part!r}")
            pairs.append((chat.strip(), _parse_list(listed)))
    else:
        raise ValueError(f"expected a mapping of chat id to user ids, got {type(raw).__name__}")
    for chat, members in pairs:
        if not chat or any(_GROUP_MAP_RESERVED.search(x) for x in (chat, *members)):
            raise ValueError(f"chat {chat!r}: ids may not be empty or hold ';', '=', ',' or white space")
    return dict(pairs)


def _parse_str(raw: Any) -> str:
    if isinstance(raw, dict | list):
        raise ValueError(f"expected text, got {type(raw).__name__}")
    return "" if raw is None else str(raw).strip()


@dataclass(frozen=True)
class Field:
    path: str  # dotted place in gateway.yaml
    env: str  # environment variable that overrides it
    parse: Callable[[Any], Any]
    default: Any
    doc: str


# fmt: off
_GATEWAY_FIELDS: tuple[Field, ...] = (
    Field("stage", "GATEWAY_STAGE", _parse_str, "dev", "deployment stage; several stages can live in one account"),
    Field("time_zone", "GATEWAY_TIME_ZONE", _parse_str, "UTC", "IANA time zone for daily resets and schedules"),
    Field("profile", "GATEWAY_PROFILE", _parse_str, "default",
          "the deployment's own profile; namespaces its session keys (more bots: profiles)"),
    Field("provider.name", "GATEWAY_PROVIDER", _parse_str, "echo", "echo | openai | bedrock"),
    Field("provider.model", "GATEWAY_MODEL", _parse_str, "", "model id for openai or bedrock"),
    Field("provider.openai_base_url", "OPENAI_BASE_URL", _parse_str, "https://api.openai.com/v1",
          "any OpenAI-compatible chat-completions base URL"),
    Field("provider.timeout_seconds", "GATEWAY_PROVIDER_TIMEOUT_SECONDS", _parse_int, 60,
          "one model request's time limit"),
    Field("provider.max_history_messages", "GATEWAY_MAX_HISTORY_MESSAGES", _parse_int, 40,
          "transcript rows sent to the model"),
    Field("provider.max_attempts", "GATEWAY_PROVIDER_MAX_ATTEMPTS", _parse_int, 3,
          "tries of one model request on 429, 5xx and timeouts (with backoff)"),
    Field("provider.retry_budget_seconds", "GATEWAY_PROVIDER_RETRY_BUDGET_SECONDS", _parse_int, 80,
          "one model request's tries and waits together stay within this"),
    Field("tools.enabled", "GATEWAY_TOOLS", _parse_list, ("session_search", "send_message", "cronjob"),
          "built-in tools besides memory: session_search, send_message, cronjob"),
    Field("tools.needs_approval", "GATEWAY_TOOLS_NEEDING_APPROVAL", _parse_list, (),
          "tools whose calls wait for the user's /approve"),
    Field("memory.max_notes", "GATEWAY_MEMORY_MAX_NOTES", _parse_int, 100, "memory notes kept per user and profile"),
    Field("memory.max_note_chars", "GATEWAY_MEMORY_MAX_NOTE_CHARS", _parse_int, 1000, "characters in one memory note"),
    Field("memory.external", "GATEWAY_MEMORY_PROVIDER", _parse_str, "",
          "a memory provider beside the built-in notes: honcho (empty: none)"),
    Field("memory.honcho_base_url", "HONCHO_BASE_URL", _parse_str, "https://api.honcho.dev",
          "the Honcho API (secret HONCHO_API_KEY)"),
    Field("memory.honcho_workspace", "HONCHO_WORKSPACE", _parse_str, "hermes", "the Honcho workspace id"),
    Field("access.allowed_users", "GATEWAY_ALLOWED_USERS", _parse_list, (), "user ids allowed on every platform"),
    Field("access.allow_all_users", "GATEWAY_ALLOW_ALL_USERS", _parse_bool, False, "allow everyone on every platform"),
    Field("access.admins", "GATEWAY_ADMINS", _parse_list, (), "user ids that are admins on every platform"),
    Field("access.user_commands", "GATEWAY_USER_COMMANDS", _parse_list, (),
          "gateway commands non-admins may run besides /help and /whoami"),
    Field("sessions.group_sessions_per_user", "GATEWAY_GROUP_SESSIONS_PER_USER", _parse_bool, True,
          "one session per user in a group"),
    Field("sessions.thread_sessions_per_user", "GATEWAY_THREAD_SESSIONS_PER_USER", _parse_bool, False,
          "one session per user in a thread"),
    Field("sessions.turn_timeout_seconds", "GATEWAY_TURN_TIMEOUT_SECONDS", _parse_int, 300,
          "a turn lease expires this long after it starts"),
    Field("sessions.busy_retry_seconds", "GATEWAY_BUSY_RETRY_SECONDS", _parse_int, 1,
          "a message for a busy session is retried after this long"),
    Field("sessions.reset_mode", "GATEWAY_RESET_MODE", _parse_str, "none",
          "when a session is replaced by a new one: none | idle | daily | both (dm, group, channel)"),
    Field("sessions.reset_idle_minutes", "GATEWAY_RESET_IDLE_MINUTES", _parse_int, 1440,
          "idle/both: a session idle this long is replaced"),
    Field("sessions.reset_at_hour", "GATEWAY_RESET_AT_HOUR", _parse_int, 4,
          "daily/both: sessions last active before this hour (time_zone) are replaced"),
    Field("sessions.reset_policy", "GATEWAY_RESET_POLICY", _parse_str, "",
          "per chat type: <dm|group|channel|thread|*>=<mode>[:<idle minutes>][@<hour>];... (threads only if named)"),
    Field("sessions.resume_window_seconds", "GATEWAY_RESUME_WINDOW_SECONDS", _parse_int, 3600,
          "a turn cut short is continued by the next message within this long (0: always)"),
    Field("sessions.route_max_idle_days", "GATEWAY_ROUTE_MAX_IDLE_DAYS", _parse_int, 90,
          "routing entries idle this long are pruned (transcripts kept; 0: never)"),
    Field("cron.grace_seconds", "GATEWAY_CRON_GRACE_SECONDS", _parse_int, 300,
          "a one-shot job found this late still runs; later it is retired with a reason"),
    Field("cron.max_jobs_per_tick", "GATEWAY_CRON_MAX_JOBS_PER_TICK", _parse_int, 50,
          "due jobs one tick claims (the rest wait for the next minute)"),
    Field("hooks.enabled", "GATEWAY_HOOKS", _parse_list, (),
          "in-process hooks to run (folders of hermes_gateway/hooks/) besides those their manifest enables"),
    Field("hooks.bus_events", "GATEWAY_BUS_EVENTS", _parse_list, ("*",),
          "lifecycle events put on the event bus: names, or prefixes ending in * (each is $1 per million)"),
    Field("turns.busy_input_mode", "GATEWAY_BUSY_INPUT_MODE", _parse_str, "queue",
          "a message during a turn: queue (after it) | interrupt (stop it) | steer (into it after a tool call)"),
    Field("turns.busy_followup", "GATEWAY_BUSY_FOLLOWUP", _parse_str, "each",
          "queued messages: each (one turn per message, in order) | one (one follow-up turn for all)"),
    Field("turns.busy_ack", "GATEWAY_BUSY_ACK", _parse_bool, True,
          "tell the chat once per turn that its message waits for the running turn"),
    Field("turns.max_queued", "GATEWAY_MAX_QUEUED", _parse_int, 20, "messages one session may queue behind its turn"),
    Field("turns.max_tool_iterations", "GATEWAY_MAX_TOOL_ITERATIONS", _parse_int, 8,
          "model calls with tools in one turn; then the model must answer"),
    Field("turns.max_turn_seconds", "GATEWAY_MAX_TURN_SECONDS", _parse_int, 900,
          "a turn's tool loop stops offering tools after this long"),
    Field("turns.continue_after_seconds", "GATEWAY_CONTINUE_AFTER_SECONDS", _parse_int, 120,
          "a tool loop this long into one execution continues in a new one"),
    Field("turns.approval_timeout_seconds", "GATEWAY_APPROVAL_TIMEOUT_SECONDS", _parse_int, 300,
          "an unanswered tool approval is denied after this long"),
    Field("turns.approvers", "GATEWAY_APPROVERS", _parse_list, (),
          "user ids that may answer any approval (besides admins and the user asked)"),
    Field("turns.workflow_type", "GATEWAY_WORKFLOW_TYPE", _parse_str, "express",
          "the turn state machine: express (billed per request) | standard (visual history)"),
    Field("ingress.max_body_bytes", "GATEWAY_MAX_BODY_BYTES", _parse_int, 65536, "larger webhook bodies get 413"),
    Field("operations.alarm_email", "GATEWAY_ALARM_EMAIL", _parse_str, "",
          "e-mail address subscribed to the alarm topic (it must confirm the subscription)"),
    Field("operations.dashboard", "GATEWAY_DASHBOARD", _parse_bool, True,
          "a CloudWatch dashboard of the gateway ($3 a month beyond an account's first three)"),
)

# Every platform has the same settings, under `platforms.<name>.` and `<NAME>_` (TELEGRAM_...).
# The tuple gives the attribute, the variable's suffix, the parser, and the doc line.
_PLATFORM_SETTINGS = (
    ("enabled", "ENABLED", _parse_bool, "accept this platform's webhooks"),
    ("api_base_url", "API_BASE_URL", _parse_str, "the platform's API base URL"),
    ("allowed_users", "ALLOWED_USERS", _parse_list, "user ids allowed on this platform"),
    ("allow_all_users", "ALLOW_ALL_USERS", _parse_bool, "allow every user of this platform"),
    ("allowed_chats", "ALLOWED_CHATS", _parse_list, "group chat ids whose every member is allowed"),
    ("group_users", "GROUP_USERS", _parse_group_map, "per group chat id, the sender ids allowed in it"),
    ("bot_policy", "BOT_POLICY", _parse_str, "messages from other bots: none | mentions | all"),
    ("unauthorized_dm", "UNAUTHORIZED_DM", _parse_str, "an unknown user's DM: pair | ignore (empty: by rule)"),
    ("admins", "ADMINS", _parse_list, "user ids that are admins on this platform"),
    ("home_channel", "HOME_CHANNEL", _parse_str, "chat_id[:thread_id] a bare platform target sends to, until /sethome"),
    ("reset_policy", "RESET_POLICY", _parse_str, "this platform's session reset policy (as sessions.reset_policy)"),
    ("reset_notice", "RESET_NOTICE", _parse_bool, "tell the chat when its session was reset automatically"),
    ("busy_input_mode", "BUSY_INPUT_MODE", _parse_str, "this platform's turns.busy_input_mode (empty: the gateway's)"),
)
_COMMON_DEFAULTS: dict[str, Any] = {
    "enabled": False, "api_base_url": "", "allowed_users": (), "allow_all_users": False,
    "allowed_chats": (), "group_users": {}, "bot_policy": "none", "unauthorized_dm": "", "admins": (),
    "home_channel": "", "reset_policy": "", "reset_notice": True, "busy_input_mode": "",
}
# The local web chat page has no users to allowlist.
_PLATFORM_OVERRIDES: dict[str, dict[str, Any]] = {"webchat": {"allow_all_users": True}}
# fmt: on

PLATFORMS = catalog.PLATFORM_NAMES
_OPTION_PARSERS: dict[str, Callable[[Any], Any]] = {
    "str": _parse_str,
    "bool": _parse_bool,
    "int": _parse_int,
    "list": _parse_list,
}
BOT_POLICIES = ("none", "mentions", "all")
UNAUTHORIZED_DM_MODES = ("", "pair", "ignore")


def _platform_fields(platform: str) -> tuple[Field, ...]:
    spec = catalog.BY_NAME[platform]
    defaults = {
        **_COMMON_DEFAULTS,
        "enabled": spec.enabled,
        "api_base_url": spec.api_base_url or "",
        **_PLATFORM_OVERRIDES.get(platform, {}),
    }
    common = tuple(
        Field(f"platforms.{platform}.{attr}", f"{platform.upper()}_{suffix}", parse, defaults[attr], doc)
        for attr, suffix, parse, doc in _PLATFORM_SETTINGS
    )
    options = tuple(
        Field(f"platforms.{platform}.{o.attr}", o.env, _OPTION_PARSERS[o.kind], o.default, o.doc) for o in spec.options
    )
    return common + options


FIELDS: tuple[Field, ...] = _GATEWAY_FIELDS + tuple(f for p in PLATFORMS for f in _platform_fields(p))
_BY_PATH = {f.path: f for f in FIELDS}
_BY_ENV = {f.env: f for f in FIELDS}


@dataclass(frozen=True)
class ProviderSettings:
    name: str
    model: str
    openai_base_url: str
    timeout_seconds: int
    max_history_messages: int
    max_attempts: int = 3
    retry_budget_seconds: int = 80


@dataclass(frozen=True)
class ToolSettings:
    enabled: tuple[str, ...] = ("session_search", "send_message", "cronjob")
    needs_approval: tuple[str, ...] = ()


@dataclass(frozen=True)
class MemorySettings:
    max_notes: int = 100
    max_note_chars: int = 1000
    external: str = ""
    honcho_base_url: str = "https://api.honcho.dev"
    honcho_workspace: str = "hermes"


@dataclass(frozen=True)
class AccessSettings:
    allowed_users: tuple[str, ...]
    allow_all_users: bool
    admins: tuple[str, ...]
    user_commands: tuple[str, ...]


@dataclass(frozen=True)
class SessionSettings:
    group_sessions_per_user: bool
    thread_sessions_per_user: bool
    turn_timeout_seconds: int
    busy_retry_seconds: int
    reset_mode: str = "none"
    reset_idle_minutes: int = 1440
    reset_at_hour: int = 4
    reset_policy: str = ""
    resume_window_seconds: int = 3600
    route_max_idle_days: int = 90

    @property
    def lease_ttl_seconds(self) -> int:
        """How long a turn's lease lasts: its time limit, and a margin."""
        return self.turn_timeout_seconds + LEASE_MARGIN_SECONDS


@dataclass(frozen=True)
class CronSettings:
    grace_seconds: int = 300
    max_jobs_per_tick: int = 50


@dataclass(frozen=True)
class HooksSettings:
    enabled: tuple[str, ...] = ()
    bus_events: tuple[str, ...] = ("*",)


@dataclass(frozen=True)
class TurnSettings:
    busy_input_mode: str = "queue"
    busy_followup: str = "each"
    busy_ack: bool = True
    max_queued: int = 20
    max_tool_iterations: int = 8
    max_turn_seconds: int = 900
    continue_after_seconds: int = 120
    approval_timeout_seconds: int = 300
    approvers: tuple[str, ...] = ()
    workflow_type: str = "express"


@dataclass(frozen=True)
class OperationsSettings:
    alarm_email: str
    dashboard: bool


@dataclass(frozen=True)
class PlatformSettings:
    name: str
    enabled: bool
    api_base_url: str
    allowed_users: tuple[str, ...]
    allow_all_users: bool
    allowed_chats: tuple[str, ...]
    group_users: Mapping[str, tuple[str, ...]]
    bot_policy: str
    unauthorized_dm: str
    admins: tuple[str, ...]
    home_channel: str = ""
    reset_policy: str = ""
    reset_notice: bool = True
    busy_input_mode: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)  # the platform's own (catalog `Option`s)


@dataclass(frozen=True)
class Settings:
    stage: str
    time_zone: str
    profile: str
    provider: ProviderSettings
    access: AccessSettings
    sessions: SessionSettings
    max_body_bytes: int
    platforms: Mapping[str, PlatformSettings]
    operations: OperationsSettings = OperationsSettings("", True)
    cron: CronSettings = CronSettings()
    hooks: HooksSettings = HooksSettings()
    turns: TurnSettings = TurnSettings()
    tools: ToolSettings = ToolSettings()
    memory: MemorySettings = MemorySettings()
    # Named profiles served beside this one (BEHAVIOUR §2): each a whole Settings, this one's
    # values overlaid with the profile's own (`profiles.<name>` in gateway.yaml). Empty on a
    # named profile's own Settings.
    profiles: Mapping[str, Settings] = field(default_factory=dict)
    # A named profile's overlay in environment form, as `GATEWAY_PROFILES` carries it.
    overlay: Mapping[str, str] = field(default_factory=dict)
    # The deployment's own profile when this is a named profile's Settings; "" on the deployment's.
    base_profile: str = ""

    @property
    def served_profile(self) -> str | None:
        """What a source, a delivery target and a webhook URL carry to name this profile: None
        for the deployment's own profile, the name for a named one."""
        return self.profile if self.base_profile else None

    def for_profile(self, name: str | None) -> Settings:
        """The settings of a profile this deployment serves: its own for None, "" or its own name;
        a named profile's otherwise. UnknownProfile for a profile it does not serve."""
        if self.base_profile:  # a named profile's own settings know only themselves
            if name == self.profile:
                return self
        elif not name or name == self.profile:
            return self
        elif name in self.profiles:
            return self.profiles[name]
        raise UnknownProfile(f"profile {name!r} is not served by this deployment")

    def all_profiles(self) -> tuple[Settings, ...]:
        """The deployment's own settings first, then each named profile's."""
        return (self, *self.profiles.values())

    def for_session_key(self, session_key: str) -> Settings:
        """The settings of the profile whose namespace the key is in (the deployment's otherwise)."""
        from hermes_gateway.domain.session_key import key_namespace

        for named in self.profiles.values():
            if session_key.startswith(key_namespace(named.profile) + ":"):
                return named
        return self

    def platform(self, name: str) -> PlatformSettings | None:
        found = self.platforms.get(name)
        return found if found is not None and found.enabled else None

    def to_env(self, *, changed_only: bool = False) -> dict[str, str]:
        """Every setting as the environment variable that carries it into a function.

        `changed_only` leaves out the settings at their default: a function's environment may
        hold 4 KB in all, and the defaults are the same code on both sides of the deploy."""
        values = _flatten_settings(self)
        env: dict[str, str] = {}
        for f in FIELDS:
            value = values[f.path]
            if changed_only and value == f.default:
                continue
            env[f.env] = _env_value(value)
        if self.profiles:
            import json

            overlays = {name: dict(named.overlay) for name, named in self.profiles.items()}
            env[PROFILES_ENV] = json.dumps(overlays, separators=(",", ":"), sort_keys=True)
        return env


def _env_value(value: Any) -> str:
    """A parsed setting as the environment variable that carries it (parsed back unchanged)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(value)
    if isinstance(value, Mapping):
        return ";".join(f"{key}={','.join(items)}" for key, items in value.items())
    return str(value)


def _flatten_settings(settings: Settings) -> dict[str, Any]:
    """Each field's value, read back along its path (`ingress.*` lives on Settings itself)."""
    values: dict[str, Any] = {}
    for f in FIELDS:
        head, _, rest = f.path.partition(".")
        if head == "platforms":
            platform, _, attr = rest.partition(".")
            found = settings.platforms[platform]
            values[f.path] = found.options[attr] if attr in found.options else getattr(found, attr)
        elif head == "ingress":
            values[f.path] = getattr(settings, rest)
        elif rest:
            values[f.path] = getattr(getattr(settings, head), rest)
        else:
            values[f.path] = getattr(settings, head)
    return values


def _flatten_yaml(data: Mapping[str, Any], prefix: str, source: str) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if str(key).upper() in SECRET_NAMES or str(key).lower() in ("bot_token", "webhook_secret", "api_key"):
            raise ConfigError(
                f"{source}: {path}: secrets do not belong in the config file; "
                "set them with `hermes-gateway secrets set` (deployed) or the environment (local)"
            )
        is_section = any(p.startswith(path + ".") for p in _BY_PATH)
        if path in _BY_PATH:
            flat[path] = value
        elif is_section and value is None:
            continue  # a section whose lines are all commented out
        elif is_section and isinstance(value, Mapping):
            flat.update(_flatten_yaml(value, path + ".", source))
        elif is_section:
            raise ConfigError(f"{source}: {path}: expected a section of settings, got {type(value).__name__}")
        else:
            raise ConfigError(f"{source}: {path}: unknown setting")
    return flat


def configured_paths(config: Mapping[str, Any], env: Mapping[str, str], source: str = "gateway.yaml") -> set[str]:
    """The settings a user set explicitly, in the config file or the environment (the
    deployment's own; named profiles' overlays are not counted)."""
    from_file = set(_flatten_yaml({k: v for k, v in config.items() if k != "profiles"}, "", source))
    return from_file | {f.path for f in FIELDS if f.env in env}


def read_yaml(path: Path) -> dict[str, Any]:
    """Read a config file; imported lazily because functions never read YAML at run time."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of settings")
    return data


def load_settings(
    env: Mapping[str, str] | None = None,
    config: Mapping[str, Any] | None = None,
    source: str = "gateway.yaml",
) -> Settings:
    """Build settings from a parsed config mapping and the environment (which wins), with every
    named profile (`profiles:` in the file, or `GATEWAY_PROFILES` in the environment)."""
    env = os.environ if env is None else env
    config = dict(config or {})
    profiles_section = config.pop("profiles", None)
    raw = _flatten_yaml(config, "", source)
    values: dict[str, Any] = {}
    for f in FIELDS:
        if f.env in env:
            value, where = env[f.env], f"environment variable {f.env}"
        elif f.path in raw:
            value, where = raw[f.path], f"{source}: {f.path}"
        else:
            values[f.path] = f.default
            continue
        try:
            values[f.path] = f.parse(value)
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    base = _build(values, source)
    if PROFILES_ENV in env:
        overlays = _overlays_from_env(env[PROFILES_ENV])
    else:
        overlays = _overlays_from_yaml(profiles_section, source)
    if len(overlays) > MAX_PROFILES:
        raise ConfigError(f"{source}: profiles: at most {MAX_PROFILES} named profiles per deployment")
    named = {name: _named_profile(name, overlay, values, base, source) for name, overlay in overlays.items()}
    return replace(base, profiles=named) if named else base


def _overlays_from_yaml(section: Any, source: str) -> dict[str, dict[str, str]]:
    """`profiles: {name: {settings as in the file}}` -> each profile's overlay in environment form."""
    if section is None:
        return {}
    if not isinstance(section, Mapping):
        raise ConfigError(f"{source}: profiles: expected a mapping of profile name to its settings")
    overlays: dict[str, dict[str, str]] = {}
    for name, body in section.items():
        where = f"{source}: profiles.{name}"
        if body is None:
            body = {}
        if not isinstance(body, Mapping):
            raise ConfigError(f"{where}: expected a section of settings, got {type(body).__name__}")
        overlay: dict[str, str] = {}
        for path, value in _flatten_yaml(body, "", where).items():
            f = _BY_PATH[path]
            try:
                overlay[f.env] = _env_value(f.parse(value))
            except ValueError as exc:
                raise ConfigError(f"{where}.{path}: {exc}") from None
        overlays[str(name)] = overlay
    return overlays


def _overlays_from_env(text: str) -> dict[str, dict[str, str]]:
    import json

    where = f"environment variable {PROFILES_ENV}"
    try:
        data = json.loads(text) if text.strip() else {}
    except ValueError:
        raise ConfigError(f"{where}: not valid JSON") from None
    if not isinstance(data, dict) or not all(
        isinstance(body, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in body.items())
        for body in data.values()
    ):
        raise ConfigError(f"{where}: expected {{profile: {{VARIABLE: value}}}}")
    for name, body in data.items():
        unknown = sorted(set(body) - set(_BY_ENV))
        if unknown:
            raise ConfigError(f"{where}: profile {name}: unknown setting(s) {', '.join(unknown)}")
    return {str(name): dict(body) for name, body in data.items()}


def _deployment_wide(path: str) -> bool:
    return any(path == wide or (wide.endswith((".", "_")) and path.startswith(wide)) for wide in _DEPLOYMENT_WIDE)


def _named_profile(
    name: str, overlay: Mapping[str, str], base_values: Mapping[str, Any], base: Settings, source: str
) -> Settings:
    """A named profile: the deployment's settings, overlaid with the profile's own. It serves only
    the platforms its overlay enables (each with its own bot, so its own secrets)."""
    where = f"{source}: profiles.{name}"
    if not NAMED_PROFILE.match(name):
        raise ConfigError(f"{where}: a profile name is 1-30 lower-case letters, digits or '_', starting with a letter")
    if name in (base.profile, "default"):
        raise ConfigError(f"{where}: {name!r} is the deployment's own profile; name the others differently")
    values = dict(base_values)
    for platform in PLATFORMS:
        values[f"platforms.{platform}.enabled"] = False
    for env_name, text in overlay.items():
        f = _BY_ENV[env_name]
        if _deployment_wide(f.path):
            raise ConfigError(f"{where}.{f.path}: is set for the whole deployment; a profile cannot change it")
        try:
            values[f.path] = f.parse(text)
        except ValueError as exc:
            raise ConfigError(f"{where}.{f.path}: {exc}") from None
    values["profile"] = name
    built = _build(values, where)
    return replace(built, overlay=dict(overlay), base_profile=base.profile)


def _is_http_url(text: str) -> bool:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(text)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname) and port_ok and not re.search(r"\s", text)


class _Invalid(Exception):
    def __init__(self, path: str, reason: str) -> None:
        super().__init__(reason)
        self.path, self.reason = path, reason


def _check_names(v: dict[str, Any]) -> None:
    if not _STAGE.match(v["stage"]):
        raise _Invalid("stage", "use 1-20 lower-case letters, digits or '-', starting with a letter")
    if not _PROFILE.match(v["profile"]):
        raise _Invalid("profile", "use 1-40 letters, digits, '_' or '-'")
    if v["provider.name"] not in PROVIDERS:
        raise _Invalid("provider.name", f"must be one of {', '.join(PROVIDERS)}")
    if v["provider.name"] != "echo" and not v["provider.model"]:
        raise _Invalid("provider.model", f"is required for provider {v['provider.name']}")
    urls = ["provider.openai_base_url"] + [f"platforms.{p}.api_base_url" for p in PLATFORMS]
    for url_field in urls:
        if (v[url_field] or url_field == "provider.openai_base_url") and not _is_http_url(v[url_field]):
            raise _Invalid(url_field, "must be an http(s) URL with a host and no white space")
    for platform in PLATFORMS:
        if v[f"platforms.{platform}.bot_policy"] not in BOT_POLICIES:
            raise _Invalid(f"platforms.{platform}.bot_policy", f"must be one of {', '.join(BOT_POLICIES)}")
        if v[f"platforms.{platform}.unauthorized_dm"] not in UNAUTHORIZED_DM_MODES:
            raise _Invalid(f"platforms.{platform}.unauthorized_dm", "must be pair, ignore or empty (decided by rule)")
    try:
        import zoneinfo

        zoneinfo.ZoneInfo(v["time_zone"])
    except Exception:  # noqa: BLE001 - any failure means the name is unusable
        raise _Invalid("time_zone", f"unknown time zone {v['time_zone']!r}") from None


def _check_limits(v: dict[str, Any]) -> None:
    for positive in (
        "provider.timeout_seconds",
        "sessions.turn_timeout_seconds",
        "sessions.busy_retry_seconds",
        "provider.max_history_messages",
    ):
        if v[positive] <= 0:
            raise _Invalid(positive, "must be greater than zero")
    upper_limits = (
        ("provider.timeout_seconds", MODEL_CALL_LIMIT_SECONDS, "the CallModel task's limit"),
        ("sessions.turn_timeout_seconds", TURN_LIMIT_SECONDS, "an Express workflow's limit"),
        ("sessions.busy_retry_seconds", BUSY_RETRY_CAP_SECONDS, "the retry delay's cap"),
    )
    for path, limit, why in upper_limits:
        if v[path] > limit:
            raise _Invalid(path, f"must be at most {limit} ({why})")
    patience = busy_patience_seconds(v["sessions.busy_retry_seconds"], INBOUND_QUEUE.max_receive_count)
    lease = v["sessions.turn_timeout_seconds"] + LEASE_MARGIN_SECONDS
    if patience <= lease:
        raise _Invalid(
            "sessions.busy_retry_seconds",
            f"its retries wait {patience:.0f} s, less than a turn's lease ({lease} s): messages would go to the DLQ",
        )
    _check_reset_policies(v)
    _check_agent_tools(v)
    email = v["operations.alarm_email"]
    if email and not re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", email):
        raise _Invalid("operations.alarm_email", "must be an e-mail address")
    if not 1024 <= v["ingress.max_body_bytes"] <= 200_000:
        raise _Invalid("ingress.max_body_bytes", "must be between 1024 and 200000 (the queue message limit)")


TOOL_NAMES = ("memory", "session_search", "send_message", "cronjob")
MEMORY_PROVIDERS = ("", "honcho")


def _check_agent_tools(v: dict[str, Any]) -> None:
    for path, known in (("tools.enabled", TOOL_NAMES[1:]), ("tools.needs_approval", TOOL_NAMES)):
        unknown = [name for name in v[path] if name not in known]
        if unknown:
            raise _Invalid(path, f"unknown tool(s) {', '.join(unknown)}; known: {', '.join(known)}")
    if not 1 <= v["provider.max_attempts"] <= 10:
        raise _Invalid("provider.max_attempts", "must be between 1 and 10")
    if not v["provider.timeout_seconds"] <= v["provider.retry_budget_seconds"] <= MODEL_CALL_LIMIT_SECONDS:
        raise _Invalid(
            "provider.retry_budget_seconds",
            f"must be at least provider.timeout_seconds and at most {MODEL_CALL_LIMIT_SECONDS} (the task's limit)",
        )
    if not 1 <= v["memory.max_notes"] <= 1000:
        raise _Invalid("memory.max_notes", "must be between 1 and 1000")
    if not 50 <= v["memory.max_note_chars"] <= 4000:
        raise _Invalid("memory.max_note_chars", "must be between 50 and 4000")
    if v["memory.external"] not in MEMORY_PROVIDERS:
        raise _Invalid("memory.external", "must be honcho or empty")
    if v["memory.external"] == "honcho" and not _is_http_url(v["memory.honcho_base_url"]):
        raise _Invalid("memory.honcho_base_url", "must be an http(s) URL with a host and no white space")
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,100}", v["memory.honcho_workspace"]):
        raise _Invalid("memory.honcho_workspace", "use 1-100 letters, digits, '_' or '-'")


def _check_cron(v: dict[str, Any]) -> None:
    if not 0 <= v["cron.grace_seconds"] <= 86400:
        raise _Invalid("cron.grace_seconds", "must be between 0 and 86400")
    if not 1 <= v["cron.max_jobs_per_tick"] <= 500:
        raise _Invalid("cron.max_jobs_per_tick", "must be between 1 and 500")
    for pattern in v["hooks.bus_events"]:
        if not re.fullmatch(r"\*|[a-z_]{1,20}(:[a-z_]{0,40}\*?|\*)", pattern):
            raise _Invalid("hooks.bus_events", f"{pattern!r}: use event names (agent:end) or prefixes (agent:*, *)")
    for name in v["hooks.enabled"]:
        if not re.fullmatch(r"[a-z0-9_]{1,40}", name):
            raise _Invalid("hooks.enabled", f"{name!r} is not a hook folder name (a-z, 0-9, _)")


def _check_reset_policies(v: dict[str, Any]) -> None:
    from hermes_gateway.domain.reset_policy import ResetPolicy, parse_policy_map

    parts = ("sessions.reset_mode", "sessions.reset_idle_minutes", "sessions.reset_at_hour")
    for path in parts:  # one at a time, so the error names the setting at fault
        try:
            ResetPolicy(**{path.removeprefix("sessions.reset_"): v[path]})
        except ValueError as exc:
            raise _Invalid(path, str(exc)) from None
    base = ResetPolicy(*(v[path] for path in parts))
    if v["sessions.route_max_idle_days"] < 0:
        raise _Invalid("sessions.route_max_idle_days", "must be 0 (never prune) or more")
    for path in ["sessions.reset_policy"] + [f"platforms.{p}.reset_policy" for p in PLATFORMS]:
        try:
            parse_policy_map(v[path], base)
        except ValueError as exc:
            raise _Invalid(path, str(exc)) from None


def _turn_settings(v: dict[str, Any]) -> TurnSettings:
    from hermes_gateway.domain.turns import BUSY_MODES, FOLLOWUP_MODES

    for path in ["turns.busy_input_mode"] + [f"platforms.{p}.busy_input_mode" for p in PLATFORMS]:
        if v[path] not in BUSY_MODES and not (path.startswith("platforms.") and v[path] == ""):
            raise _Invalid(path, f"must be one of {', '.join(BUSY_MODES)}")
    if v["turns.busy_followup"] not in FOLLOWUP_MODES:
        raise _Invalid("turns.busy_followup", f"must be one of {', '.join(FOLLOWUP_MODES)}")
    if v["turns.workflow_type"] not in WORKFLOW_TYPES:
        raise _Invalid("turns.workflow_type", f"must be one of {', '.join(WORKFLOW_TYPES)}")
    bounds = (
        ("turns.max_queued", 1, 100),
        ("turns.max_tool_iterations", 1, 50),
        ("turns.max_turn_seconds", 30, 3600),
        ("turns.continue_after_seconds", 10, TURN_LIMIT_SECONDS - MODEL_CALL_LIMIT_SECONDS - 60),
        ("turns.approval_timeout_seconds", 30, 86400),
    )
    for path, low, high in bounds:
        if not low <= v[path] <= high:
            raise _Invalid(path, f"must be between {low} and {high}")
    return TurnSettings(
        v["turns.busy_input_mode"],
        v["turns.busy_followup"],
        v["turns.busy_ack"],
        v["turns.max_queued"],
        v["turns.max_tool_iterations"],
        v["turns.max_turn_seconds"],
        v["turns.continue_after_seconds"],
        v["turns.approval_timeout_seconds"],
        v["turns.approvers"],
        v["turns.workflow_type"],
    )


def _platform_settings(platform: str, v: dict[str, Any]) -> PlatformSettings:
    values = {attr: v[f"platforms.{platform}.{attr}"] for attr, *_ in _PLATFORM_SETTINGS}
    values["api_base_url"] = values["api_base_url"].rstrip("/")
    options = {o.attr: v[f"platforms.{platform}.{o.attr}"] for o in catalog.BY_NAME[platform].options}
    return PlatformSettings(name=platform, **values, options=options)


def _build(v: dict[str, Any], source: str) -> Settings:
    try:
        _check_names(v)
        _check_limits(v)
        _check_cron(v)
        turns = _turn_settings(v)
    except _Invalid as exc:
        raise ConfigError(f"{source}: {exc.path} ({_BY_PATH[exc.path].env}): {exc.reason}") from None
    return Settings(
        stage=v["stage"],
        time_zone=v["time_zone"],
        profile=v["profile"],
        provider=ProviderSettings(
            name=v["provider.name"],
            model=v["provider.model"],
            openai_base_url=v["provider.openai_base_url"].rstrip("/"),
            timeout_seconds=v["provider.timeout_seconds"],
            max_history_messages=v["provider.max_history_messages"],
            max_attempts=v["provider.max_attempts"],
            retry_budget_seconds=v["provider.retry_budget_seconds"],
        ),
        access=AccessSettings(
            v["access.allowed_users"], v["access.allow_all_users"], v["access.admins"], v["access.user_commands"]
        ),
        sessions=SessionSettings(
            v["sessions.group_sessions_per_user"],
            v["sessions.thread_sessions_per_user"],
            v["sessions.turn_timeout_seconds"],
            v["sessions.busy_retry_seconds"],
            v["sessions.reset_mode"],
            v["sessions.reset_idle_minutes"],
            v["sessions.reset_at_hour"],
            v["sessions.reset_policy"],
            v["sessions.resume_window_seconds"],
            v["sessions.route_max_idle_days"],
        ),
        max_body_bytes=v["ingress.max_body_bytes"],
        operations=OperationsSettings(v["operations.alarm_email"], v["operations.dashboard"]),
        cron=CronSettings(v["cron.grace_seconds"], v["cron.max_jobs_per_tick"]),
        hooks=HooksSettings(v["hooks.enabled"], v["hooks.bus_events"]),
        turns=turns,
        tools=ToolSettings(v["tools.enabled"], v["tools.needs_approval"]),
        memory=MemorySettings(
            v["memory.max_notes"],
            v["memory.max_note_chars"],
            v["memory.external"],
            v["memory.honcho_base_url"].rstrip("/"),
            v["memory.honcho_workspace"],
        ),
        platforms={platform: _platform_settings(platform, v) for platform in PLATFORMS},
    )


def load_settings_file(path: Path, env: Mapping[str, str] | None = None) -> Settings:
    """Settings from a `gateway.yaml` (missing file = defaults) plus the environment."""
    config = read_yaml(path) if path.exists() else {}
    return load_settings(env=env, config=config, source=str(path))
