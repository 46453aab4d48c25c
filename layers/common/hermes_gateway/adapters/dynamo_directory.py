"""The directory on DynamoDB: home channels, chats seen by name, and targets found gone.

One table keyed `pk` + `sk`:
- `home` / `<platform>`: the chat (and thread) `/sethome` stored (`chat_id`, `thread_id`, `set_by`).
- `chan#<name key>` / `<platform>#<chat_id>#<thread_id>`: a named chat the gateway has seen; one
  query by name finds it on every platform. Written when a session starts, not per message.
- `gone#<platform>` / `<chat_id>#<thread_id>`: a target the platform said is out of reach; jobs
  skip it until a send to it succeeds again. Expires after GONE_SECONDS.
- `pace#<platform>#<profile>#<chat_id>` / `-`: a paced chat's next send time
  (adapters.dynamo_pacing). Expires an hour after its last send.
"""

from __future__ import annotations

from functools import lru_cache

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import DoesNotExist
from pynamodb.models import Model

from hermes_gateway.adapters.dynamo_errors import throttling_is_transient_everywhere
from hermes_gateway.adapters.models import dynamodb_endpoint, table_meta
from hermes_gateway.domain.targets import Channel, channel_key
from hermes_gateway.resources import Bindings

GONE_SECONDS = 90 * 24 * 3600
CHANNEL_SECONDS = 180 * 24 * 3600  # a chat not seen for this long drops out of the directory


class DirectoryItem(Model):
    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    platform = UnicodeAttribute(null=True)
    chat_id = UnicodeAttribute(null=True)
    thread_id = UnicodeAttribute(null=True)
    name = UnicodeAttribute(null=True)
    chat_type = UnicodeAttribute(null=True)
    reason = UnicodeAttribute(null=True)
    set_by = UnicodeAttribute(null=True)
    updated_at = NumberAttribute(null=True)
    expires_at = NumberAttribute(null=True)  # TTL


@lru_cache(maxsize=8)
def bind_directory(table: str, region: str | None, host: str | None = None) -> type[DirectoryItem]:
    return type("Directory", (DirectoryItem,), {"Meta": table_meta(table, region, host), "__module__": __name__})


def _place(chat_id: str, thread_id: str | None) -> str:
    """`<chat_id>#<thread_id>`, each part with `%` and `#` percent-encoded: chat `a` in thread `b#`
    and chat `a#b` are two places (ids holding neither character keep their key)."""
    return f"{_escaped(chat_id)}#{_escaped(thread_id or '')}"


def _escaped(part: str) -> str:
    return part.replace("%", "%25").replace("#", "%23")


@throttling_is_transient_everywhere
class DynamoDirectory:
    def __init__(self, bindings: Bindings, region: str | None = None) -> None:
        self.model = bind_directory(bindings.table("directory"), region, dynamodb_endpoint())

    # home channels
    def home(self, platform: str) -> tuple[str, str | None] | None:
        try:
            item = self.model.get("home", platform)
        except DoesNotExist:
            return None
        return (item.chat_id, item.thread_id) if item.chat_id else None

    def set_home(self, platform: str, chat_id: str, thread_id: str | None, set_by: str | None, now: float) -> None:
        self.model(
            "home", platform, platform=platform, chat_id=chat_id, thread_id=thread_id, set_by=set_by, updated_at=now
        ).save()

    # chats by name
    def remember(self, channel: Channel, now: float) -> None:
        key = channel_key(channel.name)
        if not key:
            return
        self.model(
            f"chan#{key}",
            f"{channel.platform}#{_place(channel.chat_id, channel.thread_id)}",
            platform=channel.platform,
            chat_id=channel.chat_id,
            thread_id=channel.thread_id,
            name=channel.name,
            chat_type=channel.chat_type,
            updated_at=now,
            expires_at=int(now + CHANNEL_SECONDS),
        ).save()

    def channels_named(self, name: str, platform: str | None = None) -> list[Channel]:
        Item = self.model
        condition = Item.sk.startswith(f"{platform}#") if platform else None
        return [
            Channel(item.platform or "", item.chat_id or "", item.thread_id, item.name or "", item.chat_type or "group")
            for item in Item.query(f"chan#{channel_key(name)}", range_key_condition=condition)
        ]

    # targets found gone
    def mark_gone(self, platform: str, chat_id: str, thread_id: str | None, reason: str, now: float) -> None:
        self.model(
            f"gone#{platform}",
            _place(chat_id, thread_id),
            platform=platform,
            chat_id=chat_id,
            thread_id=thread_id,
            reason=reason[:300],
            updated_at=now,
            expires_at=int(now + GONE_SECONDS),
        ).save()

    def gone_reason(self, platform: str, chat_id: str, thread_id: str | None, now: float) -> str | None:
        try:
            item = self.model.get(f"gone#{platform}", _place(chat_id, thread_id))
        except DoesNotExist:
            return None
        # Ignored once expired, before TTL deletes it.
        return item.reason or "gone" if item.expires_at is None or item.expires_at > now else None

    def clear_gone(self, platform: str, chat_id: str, thread_id: str | None) -> None:
        self.model(f"gone#{platform}", _place(chat_id, thread_id)).delete()
