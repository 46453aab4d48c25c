"""A platform's customer service window (BEHAVIOUR §6): WhatsApp lets a business write freely to a
person only within 24 hours of that person's last message; after it, only an approved template
message reaches them (Meta's error 131047 otherwise).

The route of a person's chat keeps when they last wrote (`heard_at`, in the write that begins or
queues each of their messages: no write of its own). A message sent unasked (a push: a cron
result, `send_message`, `hermes-gateway send`) to someone outside the window goes as the
configured re-engagement template, its text the template's body parameter, or is refused at once
with that reason. A reply answers a message just received, so it is inside the window.
"""

from __future__ import annotations

from hermes_gateway.domain.session_key import canonical_whatsapp_id

DAY = 24 * 3600
# platform -> seconds after a person's last message within which the bot may write freely
SERVICE_WINDOWS = {"whatsapp": DAY}
# A template's body parameter: one line (Meta refuses new lines, tabs and more than four spaces
# in a row: error 132018), at most this many characters.
TEMPLATE_PARAMETER_CHARS = 1000
OUTSIDE_WINDOW_REASON = "outside_window"


def window_applies(platform: str, chat_id: str, recipient_type: str | None = None) -> bool:
    """The chat is one person's on a platform with a service window (a WhatsApp group is not)."""
    if platform not in SERVICE_WINDOWS:
        return False
    return recipient_type != "group" and canonical_whatsapp_id(chat_id).isdigit()


def window_closed(platform: str, heard_at: float | None, now: float) -> bool:
    """The person last wrote longer ago than the platform's window (or never, as far as the
    gateway knows: a route it pruned, a chat it never heard from)."""
    window = SERVICE_WINDOWS.get(platform)
    return window is not None and (heard_at is None or now - heard_at > window)


def template_parameter(text: str) -> str:
    """The text as a template's body parameter: one line, cut to TEMPLATE_PARAMETER_CHARS."""
    flat = " ".join(text.split())
    return flat if len(flat) <= TEMPLATE_PARAMETER_CHARS else flat[: TEMPLATE_PARAMETER_CHARS - 1].rstrip() + "\u2026"
