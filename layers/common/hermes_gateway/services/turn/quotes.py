"""Reply context in the model's input (BEHAVIOUR §10, domain/quotes.py): a user row that answers a
message is read with the quoted text first.

A row keeps the quote ingress had, or only the answered message's platform id (WhatsApp, LINE,
Teams, Feishu; Telegram for a file sent without a caption). An id is looked up among the rows the
turn read anyway: a user message's id is on its row, at no cost. The bot's own answers keep their
ids on their outbox rows, not in the transcript: for the messages being answered now, an id not
found among the rows is looked for among the outbox rows of the newest few answers, in one
BatchGetItem made only then. What is still not found is told as a reply to a message the gateway
does not have (older rows: nothing is added).
"""

from __future__ import annotations

from collections.abc import Sequence

from hermes_gateway.domain.quotes import quote_of
from hermes_gateway.domain.sessions import TranscriptRow
from hermes_gateway.errors import TransientError
from hermes_gateway.observability import logger
from hermes_gateway.services.turn.deps import StreamRows

RECENT_ANSWERS = 3  # the newest answers whose sent messages a quoted id is looked for among
# An answer's parts a user may quote: its first two chunks, its voice note, its first file.
_PARTS = ("#1", "#2", "#v", "#m1")


def quotes(rows: Sequence[TranscriptRow], answered: int, outbox: StreamRows | None) -> dict[int, str | None]:
    """For each user row that answers a message: its seq -> the quoted text, or None when a row
    being answered now (after seq `answered`) names a message that cannot be found."""
    found: dict[int, str | None] = {}
    by_id = {r.platform_message_id: r for r in rows if r.platform_message_id}
    missing: list[TranscriptRow] = []
    for row in rows:
        if row.role != "user" or not (row.quote or row.quote_id):
            continue
        if row.quote:
            found[row.seq] = row.quote
        elif row.quote_id in by_id:
            found[row.seq] = quote_of(by_id[row.quote_id].content)
        elif row.seq > answered:
            missing.append(row)
    if missing:
        sent = _sent_answers(rows, outbox)
        found.update({row.seq: sent.get(str(row.quote_id)) for row in missing})
    return found


def _sent_answers(rows: Sequence[TranscriptRow], outbox: StreamRows | None) -> dict[str, str | None]:
    """The newest answers' sent messages: platform message id -> what the message showed."""
    answers = [r for r in rows if r.role == "assistant" and r.turn_id][-RECENT_ANSWERS:]
    if outbox is None or not answers:
        return {}
    try:
        entries = outbox.get_many([f"{r.turn_id}{part}" for r in answers for part in _PARTS])
    except TransientError as exc:  # the quote is left out; the answer goes on
        logger.warning("a quoted answer could not be looked up", extra={"error": type(exc).__name__})
        return {}
    content = {r.turn_id: r.content for r in answers}
    return {e.platform_message_id: quote_of(e.text or content.get(e.turn_id)) for e in entries if e.platform_message_id}
