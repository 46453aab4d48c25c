"""The delivery jobs a turn's tasks send to their chat (services.delivery.DeliveryJob as JSON)."""

from __future__ import annotations

from typing import Any

from hermes_gateway.domain.media import split_media_lines
from hermes_gateway.domain.turn_state import Turn
from hermes_gateway.errors import PermanentError
from hermes_gateway.observability import hash_id


def reply_job(
    turn: Turn, delivery_id: str, text: str, *, buttons: list[dict[str, str]] | None = None, threaded: bool = True
) -> dict[str, Any]:
    """A delivery job for the turn's reply target (its bot: the target names a named profile).
    `threaded`: it answers the user's message, so it may be shown as a reply to it (the
    platform's `reply_to_mode` decides, at delivery)."""
    if turn.reply_to is None:
        raise PermanentError("a chat turn without a reply target")
    job: dict[str, Any] = {
        "delivery_id": delivery_id,
        "turn_id": turn.turn_id,
        "target": turn.reply_to.to_dict(),
        **answer_fields(text),
        # follows the message into the delivery function's logs (hermes-gateway logs trace)
        "correlation_id": turn.event_id,
        "session": hash_id(turn.session_key),
    }
    if threaded and turn.source is not None and turn.source.message_id:
        job["reply_to_message_id"] = turn.source.message_id
    if buttons:
        job["buttons"] = buttons  # senders that know native buttons show these under the message
    return job


MAX_JOB_MEDIA = 20  # references a job carries (delivery attaches at most 10 and notes the rest)
_REFERENCE_CHARS = 2048


def answer_fields(text: str) -> dict[str, Any]:
    """A job's `text` and `media` from the model's answer: its `MEDIA:<reference>` lines are taken
    out of the text (never shown to the chat) and sent as files. References only: the job stays small."""
    rest, media = split_media_lines(text)
    fields: dict[str, Any] = {"text": rest}
    usable = [m.to_dict() for m in media if len(m.reference) <= _REFERENCE_CHARS][:MAX_JOB_MEDIA]
    if usable:
        fields["media"] = usable
    elif media and not rest.strip():
        fields["text"] = "(I could not attach the file: its reference is too long.)"
    return fields
