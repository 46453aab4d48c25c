"""Named profiles (BEHAVIOUR §2): one deployment, several bots, and no data shared between them.

Sessions, transcripts, memory and jobs are kept apart by the session key's namespace
(`agent:<profile>:`). The stores keyed by platform alone, DM pairing and the directory (home
channels, chats by name), are kept apart here: a named profile's platform is stored as
`<platform>@<profile>`, so approving a user for one bot never lets them talk to another, and
`/sethome` on one bot never moves another's home. The deployment's own profile keeps the plain
platform name, so its data is where it always was.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hermes_gateway.domain.pairing import Approval, ApproveResult, CodeRequest, PairingStore, PendingCode
from hermes_gateway.domain.targets import Channel

_SEPARATOR = "@"


def scoped_platform(platform: str, profile: str | None) -> str:
    """The platform as a profile's data is stored under it."""
    return f"{platform}{_SEPARATOR}{profile}" if profile else platform


def plain_platform(stored: str) -> str:
    return stored.split(_SEPARATOR, 1)[0]


class ProfilePairing:
    """A profile's view of the pairing store: its own codes, approvals and lockout."""

    def __init__(self, store: PairingStore, profile: str) -> None:
        self.store, self.profile = store, profile

    def _p(self, platform: str) -> str:
        return scoped_platform(platform, self.profile)

    def request_code(
        self, platform: str, user_id: str, user_name: str | None, chat_id: str | None, now: float
    ) -> CodeRequest:
        return self.store.request_code(self._p(platform), user_id, user_name, chat_id, now)

    def approve(self, platform: str, code: str, now: float, approved_by: str) -> ApproveResult:
        result = self.store.approve(self._p(platform), code, now, approved_by)
        if result.approval is None:
            return result
        return replace(result, approval=replace(result.approval, platform=platform))

    def is_approved(self, platform: str, user_id: str) -> bool:
        return self.store.is_approved(self._p(platform), user_id)

    def revoke(self, platform: str, user_id: str) -> bool:
        return self.store.revoke(self._p(platform), user_id)

    def pending(self, platform: str, now: float) -> list[PendingCode]:
        return [replace(item, platform=platform) for item in self.store.pending(self._p(platform), now)]

    def approved(self, platform: str) -> list[Approval]:
        return [replace(item, platform=platform) for item in self.store.approved(self._p(platform))]

    def clear_pending(self, platform: str) -> int:
        return self.store.clear_pending(self._p(platform))

    def forget_user(self, platform: str, user_id: str) -> int:
        return self.store.forget_user(self._p(platform), user_id)


def pairing_for(store: PairingStore, profile: str | None) -> PairingStore:
    """The pairing store as a profile sees it (the store itself for the deployment's own)."""
    return ProfilePairing(store, profile) if profile else store


class ProfileDirectory:
    """A profile's view of the directory: its own home channels, chats by name and gone targets
    (the deployment's own profile, None, sees the plain platforms only)."""

    def __init__(self, directory: Any, profile: str | None) -> None:
        self.directory, self.profile = directory, profile

    def _p(self, platform: str) -> str:
        return scoped_platform(platform, self.profile)

    def home(self, platform: str) -> tuple[str, str | None] | None:
        found: tuple[str, str | None] | None = self.directory.home(self._p(platform))
        return found

    def set_home(self, platform: str, chat_id: str, thread_id: str | None, set_by: str | None, now: float) -> None:
        self.directory.set_home(self._p(platform), chat_id, thread_id, set_by, now)

    def remember(self, channel: Channel, now: float) -> None:
        self.directory.remember(replace(channel, platform=self._p(channel.platform)), now)

    def channels_named(self, name: str, platform: str | None = None) -> list[Channel]:
        if platform is not None:
            found = self.directory.channels_named(name, self._p(platform))
        else:  # every platform's chats of that name, this profile's only
            found = [c for c in self.directory.channels_named(name, None) if self._mine(c.platform)]
        return [replace(c, platform=plain_platform(c.platform)) for c in found]

    def _mine(self, stored: str) -> bool:
        return stored.endswith(_SEPARATOR + self.profile) if self.profile else _SEPARATOR not in stored

    def mark_gone(self, platform: str, chat_id: str, thread_id: str | None, reason: str, now: float) -> None:
        self.directory.mark_gone(self._p(platform), chat_id, thread_id, reason, now)

    def gone_reason(self, platform: str, chat_id: str, thread_id: str | None, now: float) -> str | None:
        found: str | None = self.directory.gone_reason(self._p(platform), chat_id, thread_id, now)
        return found

    def clear_gone(self, platform: str, chat_id: str, thread_id: str | None) -> None:
        self.directory.clear_gone(self._p(platform), chat_id, thread_id)


def directory_for(directory: Any, profile: str | None) -> ProfileDirectory:
    """The directory as a profile sees it."""
    return ProfileDirectory(directory, profile)
