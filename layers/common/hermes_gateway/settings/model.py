"""`Settings`: the whole of one profile's settings, its sections, and the named profiles beside it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hermes_gateway.domain.reset_policy import parse_policy_map
from hermes_gateway.errors import UnknownProfile
from hermes_gateway.settings.declare import (
    Invalid,
    Section,
    matches,
    platform_sections,
    section,
    setting,
    text,
    time_zone,
)
from hermes_gateway.settings.sections import (
    AccessSettings,
    CompressionSettings,
    CronSettings,
    HooksSettings,
    IngressSettings,
    LimitSettings,
    MediaSettings,
    MemorySettings,
    OperationsSettings,
    PlatformSettings,
    ProviderSettings,
    SessionSettings,
    SttSettings,
    ToolSettings,
    TtsSettings,
    TurnSettings,
)


@dataclass(frozen=True, kw_only=True)
class Settings(Section):
    """Built by `load_settings` (or from the settings file a function ships with); each field is a
    top-level setting, a section of gateway.yaml (`section`), or the platforms."""

    stage: str = setting(
        "GATEWAY_STAGE",
        text,
        "dev",
        "deployment stage; several stages can live in one account",
        check=matches(
            r"[a-z][a-z0-9-]{0,19}",
            "use 1-20 lower-case letters, digits or '-', starting with a letter",
            "1-20 of a-z 0-9 -, a letter first",
        ),
        wide=True,
    )
    time_zone: str = setting(
        "GATEWAY_TIME_ZONE",
        text,
        "UTC",
        "IANA time zone for daily resets and schedules",
        check=time_zone,
        wide=True,
    )
    profile: str = setting(
        "GATEWAY_PROFILE",
        text,
        "default",
        "the deployment's own profile; namespaces its session keys (more bots: profiles)",
        check=matches(r"[A-Za-z0-9_-]{1,40}", "use 1-40 letters, digits, '_' or '-'", "1-40 of A-Z a-z 0-9 _ -"),
        wide=True,
    )
    provider: ProviderSettings = section(ProviderSettings)
    compression: CompressionSettings = section(CompressionSettings)
    tools: ToolSettings = section(ToolSettings)
    memory: MemorySettings = section(MemorySettings)
    access: AccessSettings = section(AccessSettings)
    sessions: SessionSettings = section(SessionSettings)
    limits: LimitSettings = section(LimitSettings)
    cron: CronSettings = section(CronSettings, wide=True)
    hooks: HooksSettings = section(HooksSettings, wide=True)
    turns: TurnSettings = section(TurnSettings)
    media: MediaSettings = section(MediaSettings)
    stt: SttSettings = section(SttSettings)
    tts: TtsSettings = section(TtsSettings)
    ingress: IngressSettings = section(IngressSettings, wide=True)
    operations: OperationsSettings = section(OperationsSettings, wide=True)
    # Every catalog platform's section, by platform name: `platforms.<name>.` in gateway.yaml.
    platforms: Mapping[str, PlatformSettings] = platform_sections(PlatformSettings)
    # Named profiles served beside this one (BEHAVIOUR §2): each a whole Settings, this one's
    # values overlaid with the profile's own (`profiles.<name>` in gateway.yaml). Empty on a
    # named profile's own Settings.
    profiles: Mapping[str, Settings] = field(default_factory=dict)
    # A named profile's own settings, by path, parsed: what `profiles.<name>` in gateway.yaml set.
    overlay: Mapping[str, Any] = field(default_factory=dict)
    # The deployment's own profile when this is a named profile's Settings; "" on the deployment's.
    base_profile: str = ""

    @property
    def stt_provider(self) -> str:
        """The transcription provider in effect: stt.provider, else openai where an
        OpenAI-compatible endpoint is configured (stt.base_url, or an openai model provider)."""
        if self.stt.provider:
            return self.stt.provider
        return "openai" if self.stt.base_url or self.provider.name == "openai" else "none"

    @property
    def max_body_bytes(self) -> int:
        return self.ingress.max_body_bytes

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

    def validate(self) -> None:
        base = self.sessions.base_reset_policy
        for name, platform in self.platforms.items():
            try:
                parse_policy_map(platform.reset_policy, base)
            except ValueError as exc:
                raise Invalid(f"platforms.{name}.reset_policy", str(exc)) from None
