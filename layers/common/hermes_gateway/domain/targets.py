"""Delivery targets (BEHAVIOUR §6): where a job, a tool or the CLI may send a message.

Forms:
- `origin`: the chat (and thread) the request came from;
- `local`: stored in the outbox, never sent;
- a bare platform name (`telegram`): that platform's home channel (set by `/sethome`, else config);
- `platform:chat_id[:thread_id]`: the platform is case-insensitive, ids keep their case;
- `telegram:@username`: a public channel or group by its username;
- `#name` or `platform:#name`: a channel by name, from the directory of chats the gateway has seen.

An unresolvable target is rejected with a reason when it is asked for, never at send time.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from hermes_gateway.errors import BadRequest
from hermes_gateway.platforms.catalog import BY_NAME

_CHANNEL_NAME = re.compile(r"^[^\s#][^\n]{0,99}$")
_USERNAME = re.compile(r"^@[A-Za-z0-9_]{4,64}$")


class UnresolvableTarget(BadRequest):
    """A target that names nothing the gateway can send to; the message says why."""


@dataclass(frozen=True)
class ResolvedTarget:
    platform: str  # "local" for a target that is stored only
    chat_id: str
    thread_id: str | None = None
    label: str = ""  # how the target was named, for messages and logs

    def to_dict(self, profile: str | None = None) -> dict[str, str | None]:
        """The target as a delivery job carries it; `profile` names the named profile whose bot
        sends (None: the deployment's own, and no key)."""
        found: dict[str, str | None] = {"platform": self.platform, "chat_id": self.chat_id, "thread_id": self.thread_id}
        if profile:
            found["profile"] = profile
        return found


@dataclass(frozen=True)
class ReplyTarget:
    """Where a turn's replies go: fixed when the turn starts (BEHAVIOUR §6), never read later from
    mutable session state. `profile` names the named profile whose bot answers; `context` holds
    the platform's reply details (Teams' service URL, a LINE reply token, `via: relay`)."""

    platform: str
    chat_id: str | None
    thread_id: str | None = None
    profile: str | None = None
    context: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The target as a delivery job carries it."""
        out: dict[str, Any] = {"platform": self.platform, "chat_id": self.chat_id, "thread_id": self.thread_id}
        if self.profile:
            out["profile"] = self.profile
        if self.context:
            out["context"] = dict(self.context)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReplyTarget:
        chat, thread = data.get("chat_id"), data.get("thread_id")
        return cls(
            platform=str(data["platform"]),
            chat_id=str(chat) if chat is not None else None,
            thread_id=str(thread) if thread is not None else None,
            profile=str(data["profile"]) if data.get("profile") else None,
            context={str(k): str(v) for k, v in (data.get("context") or {}).items()},
        )

    def resolved(self, label: str = "origin") -> ResolvedTarget | None:
        return ResolvedTarget(self.platform, self.chat_id, self.thread_id, label) if self.chat_id else None


@dataclass(frozen=True)
class Channel:
    platform: str
    chat_id: str
    thread_id: str | None
    name: str
    chat_type: str


class Directory(Protocol):
    """What resolution reads: home channels and the chats the gateway has seen."""

    def home(self, platform: str) -> tuple[str, str | None] | None:
        """The `/sethome` chat and thread of a platform, if one was set."""
        ...

    def channels_named(self, name: str, platform: str | None = None) -> list[Channel]: ...


def channel_key(name: str) -> str:
    """How names are compared: without a leading '#', case-folded, inner white space collapsed."""
    return " ".join(name.lstrip("#").split()).casefold()


def _known_platform(name: str) -> str:
    platform = name.strip().lower()
    if platform not in BY_NAME or BY_NAME[platform].local_only:
        raise UnresolvableTarget(f"unknown platform {name!r} (known: {', '.join(_sendable())})")
    return platform


def _sendable() -> list[str]:
    return [spec.name for spec in BY_NAME.values() if not spec.local_only]


def _by_name(name: str, platform: str | None, directory: Directory) -> ResolvedTarget:
    if not _CHANNEL_NAME.match(name.lstrip("#")):
        raise UnresolvableTarget("a channel name must be 1-100 characters")
    found = directory.channels_named(channel_key(name), platform)
    if not found:
        raise UnresolvableTarget(f"no chat named {name!r} has been seen" + (f" on {platform}" if platform else ""))
    if len(found) > 1:
        places = ", ".join(sorted(f"{c.platform}:{c.chat_id}" for c in found))
        raise UnresolvableTarget(f"{name!r} names several chats ({places}); use platform:chat_id")
    channel = found[0]
    return ResolvedTarget(channel.platform, channel.chat_id, channel.thread_id, label=name)


def resolve_target(
    spec: str,
    *,
    origin: ResolvedTarget | None,
    home_channels: dict[str, str],
    directory: Directory,
) -> ResolvedTarget:
    """Resolve one target string. `home_channels` holds each platform's configured home
    (`chat_id[:thread_id]`), used when no `/sethome` was stored."""
    text = spec.strip()
    if not text:
        raise UnresolvableTarget("empty target")
    lowered = text.lower()
    if lowered == "origin":
        if origin is None:
            raise UnresolvableTarget("'origin' has no chat here (an unattended job has no origin)")
        return ResolvedTarget(origin.platform, origin.chat_id, origin.thread_id, label="origin")
    if lowered == "local":
        return ResolvedTarget("local", "local", label="local")
    if text.startswith("#"):
        return _by_name(text, None, directory)
    head, sep, rest = text.partition(":")
    platform = _known_platform(head)
    if not sep:
        stored = directory.home(platform)
        if stored is not None:
            return ResolvedTarget(platform, stored[0], stored[1], label=platform)
        configured = home_channels.get(platform, "")
        if not configured:
            raise UnresolvableTarget(f"{platform} has no home channel: run /sethome there or set home_channel")
        home_chat, home_thread = _split_ids(platform, configured)
        return ResolvedTarget(platform, home_chat, home_thread, label=platform)
    if rest.startswith("#"):
        return _by_name(rest, platform, directory)
    if rest.startswith("@"):
        if platform != "telegram" or not _USERNAME.match(rest):
            raise UnresolvableTarget("@username targets are Telegram public chats: telegram:@name")
        return ResolvedTarget(platform, rest, label=text)
    chat_id, thread_id = _split_ids(platform, rest)
    return ResolvedTarget(platform, chat_id, thread_id, label=text)


# Chat ids on these platforms hold colons of their own (`!room:server.org`, `19:abc@thread.v2`).
_COLONS_IN_CHAT_IDS = {"matrix": 1, "teams": 1}


def _split_ids(platform: str, rest: str) -> tuple[str, str | None]:
    """`chat_id[:thread_id]`, the thread being whatever follows the chat id's own colons."""
    if rest.count(":") > _COLONS_IN_CHAT_IDS.get(platform, 0):
        chat_id, _, thread_id = rest.rpartition(":")
    else:
        chat_id, thread_id = rest, ""
    if not chat_id or any(c.isspace() for c in chat_id) or len(chat_id) > 256:
        raise UnresolvableTarget("a chat id must be 1-256 characters without white space")
    return chat_id, thread_id or None
