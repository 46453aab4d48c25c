"""Reply context (BEHAVIOUR §1, §10): the message a user answered, quoted to the model with theirs.

Where the platform hands over the quoted text (Telegram's `reply_to_message`, a Matrix reply's
fallback, a relay's `reply_to_text`), ingress keeps it on the message, cut to QUOTE_CHARS; where
only an id comes (WhatsApp's `context`, LINE's `quotedMessageId`), the turn looks the id up among
the rows it reads anyway (services/turn/quotes.py). Either way the model reads it inside the
user's own message, on one line of its own, marked as a quote: it is what the user's app showed,
user-supplied text, never a turn of the conversation (an "assistant" line in it stays a quote).
"""

from __future__ import annotations

QUOTE_CHARS = 280  # a quote's characters kept (the inbox item stays small: at most QUOTE_BYTES more)
QUOTE_BYTES = 600
UNKNOWN_QUOTE = "[replying to an earlier message the gateway does not have]"


def quote_of(text: object) -> str | None:
    """A quoted message's text as the gateway keeps it: on one line (white space collapsed, so a
    quote cannot begin a line of its own), at most QUOTE_CHARS characters and QUOTE_BYTES bytes,
    an ellipsis where it was cut. None for no text."""
    if not isinstance(text, str):
        return None
    flat = " ".join(text.split())
    if not flat:
        return None
    if len(flat) <= QUOTE_CHARS and len(flat.encode("utf-8")) <= QUOTE_BYTES:
        return flat
    cut = flat[:QUOTE_CHARS].encode("utf-8")[:QUOTE_BYTES].decode("utf-8", "ignore")
    return cut.rstrip() + "\u2026"


def quote_line(quote: str) -> str:
    """How the model reads a quote, ahead of the user's text. Its double quotes become single ones
    so the quote cannot seem to end early and leave the rest looking like the gateway's words."""
    return '[replying to: "' + quote.replace('"', "'") + '"]'


def with_quote(text: str, quote: str | None, *, replied: bool = False) -> str:
    """The user's text as the model reads it: the quote's line first when there is one, or a
    note that they answered a message the gateway could not find (`replied`)."""
    if quote:
        head = quote_line(quote)
    elif replied:
        head = UNKNOWN_QUOTE
    else:
        return text
    return f"{head}\n{text}" if text else head
