"""Mailboxes: how a reply reaches a platform the gateway cannot call.

signal-cli runs where its account's keys are (a Raspberry Pi at home, a small container), behind
a router that takes no calls from AWS. So nothing is sent from here: the delivery service writes
each chunk's outbox row `queued`, with the letter the forwarder needs (who, what, which files),
into the platform's mailbox (the outbox's `by_mailbox` index). The forwarder collects its letters
over the same signed endpoint it posts messages to, sends each through signal-cli, and reports the
platform's id for it (signal-cli's timestamp), which marks the row `sent`
(`services/mailbox.py`). A row is `sent` only then: exactly what the outbox means everywhere.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from hermes_gateway.platforms.base import Target
from hermes_gateway.platforms.outbound_media import MediaFile

# The platforms whose replies wait in a mailbox (their sender is a `Mailbox`).
MAILBOX_PLATFORMS = ("signal",)


def mailbox_name(platform: str, profile: str | None) -> str:
    """One mailbox per platform and bot (a named profile's bot has its own number and forwarder)."""
    return f"{platform}#{profile or ''}"


def upload_key(platform: str, profile: str | None, upload_id: str) -> str:
    """Where a forwarder's upload of a message's file lies in the media bucket: under its bot's
    profile, so a message can only name its own bot's uploads."""
    return f"uploads/{platform}/{profile or 'default'}/{upload_id}"


@runtime_checkable
class Mailbox(Protocol):
    """A platform's sender that sends nothing itself: the delivery service posts each chunk as a
    letter into the mailbox (the outbox row, `queued`), and the forwarder collects it."""

    mailbox: str  # mailbox_name(platform, profile)
    caption_limit: int  # a file's letter carries the reply's text up to this many characters

    def letter(self, target: Target, text: str, media: MediaFile | None) -> dict[str, Any]:
        """What the forwarder needs to send one chunk (JSON): the recipient, the text, the file
        (its media bucket key, which the mailbox service turns into a download URL), a quote.
        Raises PermanentError for a target the platform cannot have (a malformed chat id)."""
        ...


def mailbox_of(sender: object) -> Mailbox | None:
    return sender if isinstance(sender, Mailbox) else None
