"""The tasks of one agent turn, run by the turn state machine (infra/statemachines/turn.asl.json).

Each task takes the turn state and returns it, extended. Every task is idempotent on the turn
id, because an Express execution may run a task more than once: the reply is queued with a
delivery id derived from the turn, the assistant row is de-duplicated by the turn id, and the
lease is released by its token only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from hermes_gateway.domain.session_key import is_shared_session
from hermes_gateway.domain.sessions import SessionStore, TurnLease
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.errors import PermanentError
from hermes_gateway.observability import MetricUnit, hash_id, logger, metrics
from hermes_gateway.providers.base import ChatMessage, Provider
from hermes_gateway.settings import Settings

SILENT_REPLIES = ("[SILENT]", "NO_REPLY")
APOLOGY = "Sorry, something went wrong while I was answering. Please try again in a moment."


class LeaseLost(PermanentError):
    """The turn no longer holds its session's lease (it expired and was taken back)."""


class DeliveryQueue(Protocol):
    def send(self, body: dict[str, Any], *, group_id: str | None = None, dedup_id: str | None = None) -> str: ...


@dataclass
class TurnDeps:
    settings: Settings
    store: SessionStore
    lease: TurnLease
    provider: Callable[[], Provider]  # built on first use: the model client is only needed by one step
    delivery: DeliveryQueue
    now: Callable[[], float]


def system_prompt(source: SessionSource, session_id: str, settings: Settings) -> str:
    """The session context every turn carries (BEHAVIOUR §10, first part)."""
    shared = is_shared_session(
        source,
        group_sessions_per_user=settings.sessions.group_sessions_per_user,
        thread_sessions_per_user=settings.sessions.thread_sessions_per_user,
    )
    where = source.description
    if source.platform in ("telegram", "whatsapp", "signal", "bluebubbles"):
        # Ids on these platforms are personal data; the model gets stable hashed handles.
        where = f"{source.chat_type} on {source.platform} (chat {source.platform}:{hash_id(source.chat_id)})"
    lines = [
        "You are Hermes, an AI assistant that people reach through their chat apps.",
        "",
        "Session context:",
        f"- Source: {where}",
        f"- Shared session: {'yes, several people talk here; user turns start with [Name]' if shared else 'no'}",
        f"- Session id: {session_id}",
    ]
    return "\n".join(lines)


def _source(turn: dict[str, Any]) -> SessionSource:
    return SessionSource.from_dict(turn["source"])


def prepare(turn: dict[str, Any], deps: TurnDeps) -> dict[str, Any]:
    route = deps.store.get_route(turn["session_key"])
    if route is None or route.lease_token != turn["lease_token"]:
        raise LeaseLost("the session's lease is no longer held by this turn")
    logger.info("agent:start", extra={"turn_id": turn["turn_id"]})
    return {**turn, "system": system_prompt(_source(turn), turn["session_id"], deps.settings)}


def call_model(turn: dict[str, Any], deps: TurnDeps) -> dict[str, Any]:
    source = _source(turn)
    shared = is_shared_session(
        source,
        group_sessions_per_user=deps.settings.sessions.group_sessions_per_user,
        thread_sessions_per_user=deps.settings.sessions.thread_sessions_per_user,
    )
    rows = deps.store.transcript(
        turn["session_id"], upto_seq=int(turn["user_seq"]), limit=deps.settings.provider.max_history_messages
    )
    messages = [
        ChatMessage(
            row.role,
            f"[{row.sender_name}] {row.content}" if shared and row.role == "user" and row.sender_name else row.content,
        )
        for row in rows
        if row.role in ("user", "assistant")
    ]
    if not messages or messages[-1].role != "user":
        raise PermanentError("the transcript does not end with the user's message")
    provider = deps.provider()
    reply = provider.complete(turn["system"], messages)
    metrics.add_metric(name="ModelTokensIn", unit=MetricUnit.Count, value=reply.input_tokens)
    metrics.add_metric(name="ModelTokensOut", unit=MetricUnit.Count, value=reply.output_tokens)
    return {
        **turn,
        "reply": {
            "text": reply.text,
            "model": reply.model,
            "input_tokens": reply.input_tokens,
            "output_tokens": reply.output_tokens,
            "stop_reason": reply.stop_reason,
        },
    }


def _queue_delivery(deps: TurnDeps, turn: dict[str, Any], delivery_id: str, text: str) -> None:
    deps.delivery.send(
        {
            "delivery_id": delivery_id,
            "turn_id": turn["turn_id"],
            "target": turn["reply_to"],
            "text": text,
            # follows the message into the delivery function's logs (hermes-gateway logs trace)
            "correlation_id": turn.get("event_id"),
            "session": hash_id(turn.get("session_key")),
        }
    )


def deliver(turn: dict[str, Any], deps: TurnDeps) -> dict[str, Any]:
    text = turn["reply"]["text"]
    if text.strip() in SILENT_REPLIES:
        logger.info("silent reply: stored, not sent")
        return {**turn, "delivery": "silent"}
    _queue_delivery(deps, turn, turn["turn_id"], text)
    return {**turn, "delivery": "queued"}


def commit(turn: dict[str, Any], deps: TurnDeps) -> dict[str, Any]:
    reply = turn["reply"]
    deps.store.append_message(
        turn["session_id"],
        "assistant",
        reply["text"],
        deps.now(),
        dedupe_key=f"{turn['turn_id']}:reply",
        turn_id=turn["turn_id"],
        input_tokens=reply["input_tokens"],
        output_tokens=reply["output_tokens"],
    )
    released = deps.lease.release(turn["session_key"], turn["lease_token"])
    latency = max(0.0, deps.now() - float(turn.get("started_at", deps.now())))
    metrics.add_metric(name="TurnCompleted", unit=MetricUnit.Count, value=1)
    metrics.add_metric(name="TurnLatency", unit=MetricUnit.Seconds, value=latency)
    logger.info("agent:end", extra={"turn_id": turn["turn_id"], "lease_released": released})
    return {"turn_id": turn["turn_id"], "delivery": turn.get("delivery"), "released": released}


def fail(turn: dict[str, Any], deps: TurnDeps) -> dict[str, Any]:
    error = turn.get("error") or {}
    error_name = str(error.get("Error", "unknown"))
    logger.error("turn failed", extra={"turn_id": turn["turn_id"], "error": error_name})
    metrics.add_metric(name="TurnFailed", unit=MetricUnit.Count, value=1)
    # No apology when the session moved on without this turn, or when the answer already went out
    # (a failure in Commit comes after Deliver queued the reply).
    if error_name != LeaseLost.__name__ and turn.get("delivery") not in ("queued", "silent"):
        _queue_delivery(deps, turn, f"{turn['turn_id']}-failed", APOLOGY)
    released = deps.lease.release(turn["session_key"], turn["lease_token"])
    return {"turn_id": turn["turn_id"], "failed": error_name, "released": released}


STEPS: dict[str, Callable[[dict[str, Any], TurnDeps], dict[str, Any]]] = {
    "prepare": prepare,
    "call_model": call_model,
    "deliver": deliver,
    "commit": commit,
    "fail": fail,
}


def run_step(step: str, turn: dict[str, Any], deps: TurnDeps) -> dict[str, Any]:
    try:
        task = STEPS[step]
    except KeyError:
        raise PermanentError(f"unknown turn step {step!r}") from None
    logger.append_keys(correlation_id=turn.get("event_id"), session=hash_id(turn.get("session_key")))
    return task(turn, deps)
