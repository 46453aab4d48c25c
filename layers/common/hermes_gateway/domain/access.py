"""Authorization (BEHAVIOUR §4): who may talk to the agent, and what an unknown user's DM gets.

The layers are checked in the order of §4 and the first that allows wins. Every layer is an
allow, so the pure checks run before the one that reads storage (an approved pairing): the
answer is the same, and a message from an allowlisted user costs no read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from hermes_gateway.domain.session_key import canonical_whatsapp_id
from hermes_gateway.domain.source import SessionSource

IsPaired = Callable[[str, str], bool]  # (platform, user id) -> approved by pairing


# What authorization reads of the settings, declared here so the domain imports no settings (the
# settings package imports the domain); `hermes_gateway.settings.Settings` is one.
class PlatformAccess(Protocol):
    @property
    def allowed_users(self) -> tuple[str, ...]: ...
    @property
    def allow_all_users(self) -> bool: ...
    @property
    def allowed_chats(self) -> tuple[str, ...]: ...
    @property
    def group_users(self) -> Mapping[str, tuple[str, ...]]: ...
    @property
    def bot_policy(self) -> str: ...
    @property
    def unauthorized_dm(self) -> str: ...
    @property
    def admins(self) -> tuple[str, ...]: ...


class GatewayAccess(Protocol):
    @property
    def allowed_users(self) -> tuple[str, ...]: ...
    @property
    def allow_all_users(self) -> bool: ...
    @property
    def admins(self) -> tuple[str, ...]: ...


class AccessRules(Protocol):
    @property
    def access(self) -> GatewayAccess: ...

    def platform(self, name: str) -> PlatformAccess | None:
        """The platform's access settings when it is enabled."""
        ...


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str  # a bounded code, safe to log and to count as a metric dimension


@dataclass(frozen=True)
class AccessFacts:
    """What the verified ingress path knows about a message; never read from the wire."""

    trusted: bool = False  # delivered by a signed generic webhook or an authenticated relay
    mentions_bot: bool = False  # the message mentions this bot (for the `mentions` bot policy)
    role_granted: bool = False  # the platform grants access by role (Discord roles)


def _forms(user_id: str, platform: str) -> set[str]:
    """The forms an id matches in an allowlist: itself, its part before `@`, a WhatsApp alias."""
    forms = {user_id}
    if "@" in user_id:
        forms.add(user_id.split("@", 1)[0])
    if platform == "whatsapp":
        forms.add(canonical_whatsapp_id(user_id))
    return forms


def _mail_listed(address: str, entries: set[str]) -> bool:
    """An e-mail sender: the whole address (any case), or `*@<domain>` for every address at that
    domain. Never its part before `@` alone: `alice` would let alice at any domain in."""
    address = address.lower()
    domain = address.rpartition("@")[2]
    lowered = {entry.lower() for entry in entries}
    return address in lowered or (bool(domain) and f"*@{domain}" in lowered)


def _listed(user_id: str, allowed: Iterable[str], platform: str) -> bool:
    entries = set(allowed)
    if "*" in entries:
        return True
    if platform == "email":
        return _mail_listed(user_id, entries)
    if platform == "whatsapp":
        entries |= {canonical_whatsapp_id(e) for e in entries}
    return bool(_forms(user_id, platform) & entries)


def authorize(
    source: SessionSource,
    settings: AccessRules,
    *,
    is_paired: IsPaired,
    facts: AccessFacts = AccessFacts(),
) -> Decision:
    if facts.trusted:
        # A relay may deliver for a platform the gateway has no webhook for (Signal); its signature
        # is the authority, so the platform's own switch does not apply.
        return Decision(True, "trusted_source")
    platform = settings.platform(source.platform)
    if platform is None:
        return Decision(False, "platform_disabled")
    return _by_source(source, platform, facts) or _by_user(source, platform, settings, is_paired, facts)


def _by_source(source: SessionSource, platform: PlatformAccess, facts: AccessFacts) -> Decision | None:
    """Layers 2-3: an allowlisted group chat, and the bot-sender policy (layer 1, trust, is checked first)."""
    if source.chat_type != "dm" and source.chat_id and _listed(source.chat_id, platform.allowed_chats, ""):
        return Decision(True, "group_chat_allowlist")
    if source.is_bot:
        if platform.bot_policy == "all" or (platform.bot_policy == "mentions" and facts.mentions_bot):
            return Decision(True, "bot_policy")
        return Decision(False, "bot_sender")
    return None


def _by_user(
    source: SessionSource, platform: PlatformAccess, settings: AccessRules, is_paired: IsPaired, facts: AccessFacts
) -> Decision:
    """Layers 4-9, on the sender's ids; the pairing read comes last (see the module doc)."""
    user_ids = [u for u in (source.user_id, source.user_id_alt) if u]
    if not user_ids:
        return Decision(False, "no_user_id")
    if platform.allow_all_users:
        return Decision(True, "platform_allow_all")
    if facts.role_granted:
        return Decision(True, "role_grant")
    group_users = platform.group_users.get(source.chat_id or "", ()) if source.chat_type != "dm" else ()
    for user_id in user_ids:
        if _listed(user_id, platform.allowed_users, source.platform):
            return Decision(True, "platform_allowlist")
        if _listed(user_id, group_users, source.platform):
            return Decision(True, "group_user_allowlist")
        if _listed(user_id, settings.access.allowed_users, source.platform):
            return Decision(True, "gateway_allowlist")
    if settings.access.allow_all_users:
        return Decision(True, "gateway_allow_all")
    if any(is_paired(source.platform, user_id) for user_id in user_ids):
        return Decision(True, "paired")
    return Decision(False, "not_allowlisted")


def any_allowlist(platform: PlatformAccess, settings: AccessRules) -> bool:
    return bool(
        platform.allowed_users or platform.allowed_chats or platform.group_users or settings.access.allowed_users
    )


def unauthorized_dm_action(source: SessionSource, settings: AccessRules) -> str:
    """`pair` or `ignore` for a DM that was denied (groups are always ignored): the platform's
    explicit setting first; e-mail ignores; with any allowlist configured, ignore; else pair."""
    platform = settings.platform(source.platform)
    if platform is None or source.chat_type != "dm" or source.is_bot or not source.user_id:
        return "ignore"
    if platform.unauthorized_dm:
        return platform.unauthorized_dm
    if source.platform == "email":
        return "ignore"
    return "ignore" if any_allowlist(platform, settings) else "pair"


def is_admin(source: SessionSource, settings: AccessRules) -> bool:
    platform = settings.platform(source.platform)
    admins = (*settings.access.admins, *(platform.admins if platform else ()))
    return any(u and _listed(u, admins, source.platform) for u in (source.user_id, source.user_id_alt))
