"""The `send_message` tool: a message to a delivery target (BEHAVIOUR §6). A target outside the
turn's own chat, the home channels and the operator's list waits for an admin's approval
(BEHAVIOUR §11: `outside_reach` is the tool's gate).

The target is resolved when the tool is called, so a bad one is the model's to fix, never a
failure at send time. The job is a push that is mirrored into the target chat's session; its
delivery id comes from the turn and the tool call, so a task that runs twice queues it once
(the outbox refuses the second).
"""

from __future__ import annotations

import hashlib
from typing import Any

from hermes_gateway.domain.media import OutboundMedia
from hermes_gateway.domain.targets import ResolvedTarget, UnresolvableTarget, resolve_target
from hermes_gateway.observability import hash_id
from hermes_gateway.providers.base import ToolSpec
from hermes_gateway.tools.base import SpecTool, ToolContext, ToolError, result_text

MAX_TEXT_CHARS = 20_000  # delivery splits long text per platform; this bounds one call
MAX_MEDIA = 10  # files one message attaches (delivery's own bound)
MAX_REFERENCE_CHARS = 2048

SEND_MESSAGE_SPEC = ToolSpec(
    name="send_message",
    description=(
        "Send a message to a chat other than (or besides) this one. target is one of: 'origin' (this chat), "
        "a platform name for its home channel ('telegram'), 'platform:chat_id' or 'platform:chat_id:thread_id', "
        "'#channel-name' or 'platform:#channel-name', 'telegram:@username', or 'local' (stored, not sent). "
        "Your reply in this chat is sent anyway; use this only to reach somewhere else. "
        "media: files to attach, each an https URL or a stored media key."
    ),
    parameters={
        "type": "object",
        "properties": {
            "target": {"type": "string", "minLength": 1, "maxLength": 300},
            "text": {"type": "string", "minLength": 1, "maxLength": MAX_TEXT_CHARS},
            "media": {
                "type": "array",
                "items": {"type": "string", "minLength": 1, "maxLength": MAX_REFERENCE_CHARS},
                "maxItems": MAX_MEDIA,
            },
        },
        "required": ["target", "text"],
        "additionalProperties": False,
    },
)


def delivery_id_for(turn_id: str, call_id: str) -> str:
    """The same turn and tool call always give the same id: a repeated task queues nothing new."""
    return f"{turn_id}:send:{hashlib.sha256(call_id.encode()).hexdigest()[:12]}"


def send_message(arguments: dict[str, Any], ctx: ToolContext) -> str:
    text = str(arguments["text"])
    if not text.strip():
        raise ToolError("text is empty")
    media = _media(arguments.get("media"), ctx)
    queue = ctx.require("delivery")
    target = _target(arguments, ctx)
    delivery_id = delivery_id_for(ctx.turn_id, ctx.call_id)
    files_session = ctx.reach.files_session if ctx.reach is not None else None
    queue.send(
        {
            "delivery_id": delivery_id,
            "kind": "push",
            "mirror": True,
            "turn_id": ctx.turn_id,
            "target": target.to_dict(ctx.sends_as),
            "text": text,
            "correlation_id": ctx.correlation_id,
            "session": hash_id(ctx.session_key),
            # the stored files it may attach are the turn's own session's (never one the model names)
            **({"session_id": files_session} if files_session else {}),
            **({"media": [m.to_dict() for m in media]} if media else {}),
        }
    )
    where = (
        "stored locally (not sent)" if target.platform == "local" else f"queued for {target.label or target.platform}"
    )
    return result_text({"status": where, "delivery_id": delivery_id})


def _target(arguments: dict[str, Any], ctx: ToolContext) -> ResolvedTarget:
    try:
        return resolve_target(
            str(arguments["target"]),
            origin=ctx.origin,
            home_channels=ctx.home_channels,
            directory=ctx.require("directory"),
        )
    except UnresolvableTarget as exc:
        raise ToolError(f"cannot send there: {exc}") from None


def outside_reach(arguments: dict[str, Any], ctx: ToolContext) -> str | None:
    """A send to a chat other than the turn's own, a home channel or a listed target: an admin or
    approver must approve it (BEHAVIOUR §11). An unresolvable target is the call's own error."""
    if ctx.reach is None or ctx.directory is None:
        return None
    try:
        target = _target(arguments, ctx)
    except ToolError:
        return None
    if not ctx.reach.send.needs_approval(str(arguments["target"]), target):
        return None
    return f"send a message to {target.label or target.platform}, outside this chat"


def _media(raw: Any, ctx: ToolContext) -> tuple[OutboundMedia, ...]:
    """The `media` argument: references, fetched and attached at delivery (a bad one gets a note).
    A URL must have come from the user or a tool result (or a listed host): never one the model
    made up, which could carry the conversation out in its query string."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) > MAX_MEDIA:
        raise ToolError(f"media must be a list of at most {MAX_MEDIA} references")
    found = []
    for item in raw:
        if (
            not isinstance(item, str)
            or not item.strip()
            or len(item) > MAX_REFERENCE_CHARS
            or any(c.isspace() for c in item.strip())
        ):
            raise ToolError("each media entry must be one URL or stored media key")
        if ctx.reach is None or not ctx.reach.media.allows(item.strip()):
            raise ToolError(
                "cannot attach a URL that did not come from the user or a tool result in this turn; "
                "attach only such URLs, or send the link as text"
            )
        found.append(OutboundMedia(item.strip()))
    return tuple(found)


SEND_MESSAGE = SpecTool(SEND_MESSAGE_SPEC, send_message, gate=outside_reach)
