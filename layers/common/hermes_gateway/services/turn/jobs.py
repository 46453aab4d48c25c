"""The delivery jobs a turn's tasks send to their chat (services.delivery.DeliveryJob as JSON)."""

from __future__ import annotations

from typing import Any

from hermes_gateway.domain.media import split_media_lines
from hermes_gateway.domain.reach import MediaReach
from hermes_gateway.domain.turn_state import Turn, TurnKind
from hermes_gateway.errors import PermanentError
from hermes_gateway.observability import hash_id, logger


def reply_job(
    turn: Turn,
    delivery_id: str,
    text: str,
    *,
    buttons: list[dict[str, str]] | None = None,
    threaded: bool = True,
    media: MediaReach | None = None,
    answer: bool = False,
) -> dict[str, Any]:
    """A delivery job for the turn's reply target (its bot: the target names a named profile).
    `threaded`: it answers the user's message, so it may be shown as a reply to it (the
    platform's `reply_to_mode` decides, at delivery). `media`: the URLs a `MEDIA:` line of
    `text` may name (None: none, as in the gateway's own notices); the stored files it may
    attach are the turn's own session's, named in the job (`session_id`), never by the model.
    `answer`: it is the model's answer, spoken too when the turn says so (never the gateway's
    own notices, questions or apologies)."""
    if turn.reply_to is None:
        raise PermanentError("a chat turn without a reply target")
    job: dict[str, Any] = {
        "delivery_id": delivery_id,
        "turn_id": turn.turn_id,
        "target": turn.reply_to.to_dict(),
        **answer_fields(text, media or MediaReach()),
        # follows the message into the delivery function's logs (hermes-gateway logs trace)
        "correlation_id": turn.event_id,
        "session": hash_id(turn.session_key),
    }
    if turn.kind is TurnKind.CHAT and turn.session_id:
        job["session_id"] = turn.session_id
    if threaded and turn.source is not None and turn.source.message_id:
        job["reply_to_message_id"] = turn.source.message_id
    if buttons:
        job["buttons"] = buttons  # senders that know native buttons show these under the message
    if answer and turn.speak:
        job["speak"] = True  # synthesized once by the delivery that sends it (services/speech.py)
    return job


MAX_JOB_MEDIA = 20  # references a job carries (delivery attaches at most 10 and notes the rest)
_REFERENCE_CHARS = 2048


def answer_fields(text: str, reach: MediaReach) -> dict[str, Any]:
    """A job's `text` and `media` from the model's answer: its `MEDIA:<reference>` lines are taken
    out of the text (never shown to the chat) and sent as files. References only: the job stays
    small. A URL the turn may not fetch (`reach`) is never requested: the answer says so."""
    rest, media = split_media_lines(text)
    fields: dict[str, Any] = {"text": rest}
    allowed = [m for m in media if reach.allows(m.reference)]
    if len(allowed) < len(media):
        logger.info("media not attached", extra={"reason": "url_outside_turn", "count": len(media) - len(allowed)})
        names = ", ".join(_name(m.reference) for m in media if m not in allowed)
        rest = f"{rest}\n\n(I could not attach {names}: its address did not come from this conversation.)".strip()
        fields["text"] = rest
    usable = [m.to_dict() for m in allowed if len(m.reference) <= _REFERENCE_CHARS][:MAX_JOB_MEDIA]
    if usable:
        fields["media"] = usable
    elif allowed and not rest.strip():
        fields["text"] = "(I could not attach the file: its reference is too long.)"
    return fields


def _name(reference: str) -> str:
    """How a note names a URL: its last path segment (never its query string: it may carry data)."""
    name = reference.split("?", 1)[0].split("#", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    return name[:80] or "a file"
