"""Authorization (BEHAVIOUR §4), the allowlist layers. Pairing and the other layers come with
issue #4; the order here already follows §4 so they slot in without reordering."""

from __future__ import annotations

from dataclasses import dataclass

from hermes_gateway.domain.source import SessionSource
from hermes_gateway.settings import Settings


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str  # a bounded code, safe to log and to count as a metric dimension


def _matches(user_id: str, allowed: tuple[str, ...]) -> bool:
    if "*" in allowed or user_id in allowed:
        return True
    # An id with `@` (e.g. an e-mail or a JID) also matches by its part before `@`.
    return "@" in user_id and user_id.split("@", 1)[0] in allowed


def authorize(source: SessionSource, settings: Settings) -> Decision:
    """The first layer that allows wins; otherwise deny."""
    platform = settings.platform(source.platform)
    if platform is None:
        return Decision(False, "platform_disabled")
    if source.is_bot:
        return Decision(False, "bot_sender")
    user_ids = [u for u in (source.user_id, source.user_id_alt) if u]
    if not user_ids:
        return Decision(False, "no_user_id")
    if platform.allow_all_users:
        return Decision(True, "platform_allow_all")
    for user_id in user_ids:
        if _matches(user_id, platform.allowed_users):
            return Decision(True, "platform_allowlist")
        if _matches(user_id, settings.access.allowed_users):
            return Decision(True, "gateway_allowlist")
    if settings.access.allow_all_users:
        return Decision(True, "gateway_allow_all")
    return Decision(False, "not_allowlisted")
