"""The Respond task: ask the model, and either run its tool calls next or settle its answer.

A turn's first task also prepares it (the session context, a replaced session's memory flush
waited for, a repeated flush skipped). A chat turn's answer is written to the transcript here, at
the seq the route allocated for it when the turn began: if /stop came first, its marker holds the
seq and the answer is neither kept nor sent. What is to be sent becomes delivery jobs for the
workflow's Deliver state, which invokes the delivery function.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hermes_gateway.domain.context import calibrated, request_tokens
from hermes_gateway.domain.sessions import TranscriptRow
from hermes_gateway.domain.targets import ReplyTarget, UnresolvableTarget, resolve_target
from hermes_gateway.domain.turn_state import Reply, Step, ToolLoop, Turn, TurnKind, TurnState
from hermes_gateway.errors import ModelUnavailable, PermanentError, TransientError
from hermes_gateway.observability import MetricUnit, logger, metrics
from hermes_gateway.providers.base import ChatMessage, ModelReply, Provider, ToolSpec, streaming_of
from hermes_gateway.services.turn import compaction, stream
from hermes_gateway.services.turn.context import emit, history, memory_manager, turn_system
from hermes_gateway.services.turn.deps import TurnDeps
from hermes_gateway.services.turn.jobs import answer_fields, reply_job
from hermes_gateway.services.turn.presence import typing_shown
from hermes_gateway.services.turn.reach import turn_reach

SILENT_REPLIES = ("[SILENT]", "NO_REPLY")
FLUSH_POLL_SECONDS = 0.5


def respond(state: TurnState, deps: TurnDeps) -> TurnState:
    now = deps.now()
    if state.system is None:
        state = _prepare(state, deps)
        if state.next is Step.FINISH:
            return state
    loop = state.loop if state.loop.exec_started else replace(state.loop, exec_started=now)
    provider = _provider(state.turn, deps)
    # The history read once; a long one is compressed first (the turn may move to the child session).
    before = replace(state, loop=loop)
    state, read = compaction.prepare(before, deps, provider)
    if compaction.requested(state.turn):  # /compress: its turn answers without asking the model
        return settle(replace(state, reply=compaction.command_reply(before, state)), deps)
    turn, loop = state.turn, state.loop
    tools = _tool_specs(turn, loop, deps, now)
    system = (state.system or "") + _remembered(state, deps, compaction.last_text(read))
    past = history(turn, deps, read, compaction.room(turn, deps, loop, system, tools))
    messages = past + list(loop.messages)
    # the reply's streamed message may be from an earlier try of this task or model call of the turn
    writer = stream.writer_for(turn, deps, provider, earlier_try=state.attempt > 0 or not before.loop.fresh)
    with typing_shown(turn, deps):
        try:
            reply = _ask_model(provider, system, messages, tools, writer)
        except stream.StreamStopped:
            # /stop came mid-stream: the message keeps what it shows (settle finds the stop marker)
            assert writer is not None
            reply, writer.closed = ModelReply(writer.text, "stopped", stop_reason="stopped"), True
    usage = loop.usage + reply.usage
    ratio = calibrated(loop.ratio, reply.input_tokens, request_tokens(system, messages, tools))
    loop = replace(loop, usage=usage, iterations=loop.iterations + 1, ratio=ratio)
    emit(deps, "agent:step", turn, step="model", iteration=loop.iterations, tool_calls=len(reply.tool_calls))
    if reply.tool_calls and tools:
        if writer is not None:
            writer.finish(reply.text)  # the text before the calls shows while they run
        loop = replace(loop, messages=(*loop.messages, reply.as_message()), pending=tuple(reply.tool_calls), results={})
        return state.go(Step.TOOLS, loop=loop)
    answer = Reply(reply.text, reply.model, usage, prompt_tokens=reply.input_tokens, stop_reason=reply.stop_reason)
    streamed = writer.finish(reply.text) if writer is not None else None
    settled = settle(replace(state, loop=loop, reply=answer), deps, streamed=streamed)
    if writer is not None and settled.next is not Step.DELIVER:
        writer.close()  # stopped, or silent: no delivery completes the streamed message
    return settled


def _ask_model(
    provider: Provider,
    system: str,
    messages: list[ChatMessage],
    tools: list[ToolSpec] | None,
    writer: stream.StreamWriter | None = None,
) -> ModelReply:
    """One model request. The provider retries inside its own budget; what still fails after it
    is not retried by the workflow (the task's time limit holds one budget, not two)."""
    try:
        streaming = streaming_of(provider) if writer is not None else None
        if streaming is not None and writer is not None:
            return streaming.stream(system, messages, tools, writer.on_text)
        # A turn without tools asks as a plain chat (providers that know no tools work unchanged).
        return provider.complete(system, messages, tools) if tools else provider.complete(system, messages)
    except TransientError as exc:
        raise ModelUnavailable(f"the model kept failing: {type(exc).__name__}") from exc


def _prepare(state: TurnState, deps: TurnDeps) -> TurnState:
    turn = state.turn
    if turn.kind is TurnKind.CHAT and turn.notes.after_flush and state.loop.fresh:
        _await_flush(turn.notes.after_flush, deps)
    if (
        turn.kind is TurnKind.FLUSH
        and state.loop.fresh
        and turn.session_id
        and deps.catalogue.memory_flushed(turn.session_id)
    ):
        # Started again (the sweep ended the session and a later message replaced it, or an
        # Express start was repeated): the memories were saved once; no second model call.
        logger.info("memory flush already done", extra={"turn_id": turn.turn_id})
        return state.go(Step.FINISH, stopped=True)
    if state.loop.fresh:
        logger.debug("agent:start", extra={"turn_id": turn.turn_id, "kind": turn.kind.value})
        emit(deps, "agent:start", turn)
    return replace(state, system=turn_system(turn, deps))


def _await_flush(replaced_session_id: str, deps: TurnDeps) -> bool:
    """BEHAVIOUR §3: a reset flushes the replaced session's memories first. The new session's
    first turn waits (within its task's time limit) until that flush turn is over, so what it
    saved is remembered in this answer; a flush that takes longer is not waited for."""
    for _ in range(int(deps.flush_wait_seconds / FLUSH_POLL_SECONDS) + 1):
        if deps.catalogue.memory_flushed(replaced_session_id):
            return True
        deps.sleep(FLUSH_POLL_SECONDS)
    logger.warning("the replaced session's memory flush is still running; answering without it")
    return False


def _tool_specs(turn: Turn, loop: ToolLoop, deps: TurnDeps, now: float) -> list[ToolSpec] | None:
    """The tools the model may call now; None once the loop's bounds are reached (it must answer)."""
    limits = deps.settings.turns
    if loop.iterations >= limits.max_tool_iterations or now - turn.started_at >= limits.max_turn_seconds:
        return None
    specs = [tool.spec for tool in deps.tools(turn.kind)]
    return specs or None


def _provider(turn: Turn, deps: TurnDeps) -> Provider:
    if turn.model_override is not None and deps.provider_for is not None:
        return deps.provider_for(turn.model_override)
    return deps.provider()


def _remembered(state: TurnState, deps: TurnDeps, query: str) -> str:
    manager = memory_manager(state, deps) if state.turn.kind is TurnKind.CHAT else None
    context = manager.prefetch(query) if manager is not None else ""
    return f"\n\nWhat you remember about this user (from memory):\n{context}" if context.strip() else ""


# -- the answer --------------------------------------------------------------------------------


def settle(state: TurnState, deps: TurnDeps, *, streamed: str | None = None) -> TurnState:
    """Keep the answer and say what is sent: a chat's reply row, then its delivery; a cron run's
    deliveries to its targets; a flush sends nothing. `streamed`: the answer's first chunk was
    posted as it was written (services/turn/stream.py); the delivery completes that message."""
    assert state.reply is not None
    turn, text = state.turn, state.reply.text
    metrics.add_metric(name="ModelTokensOut", unit=MetricUnit.Count, value=state.reply.usage.output_tokens)
    if turn.kind is TurnKind.FLUSH:
        return state.go(Step.FINISH)
    silent = text.strip() in SILENT_REPLIES or not text.strip()
    if turn.kind is TurnKind.CRON:
        return state.go(Step.FINISH) if silent else state.go(Step.DELIVER, deliveries=tuple(_cron_jobs(state, deps)))
    if keep_reply(state, deps) == "stopped":
        # /stop (or an interrupting message) came while the model was answering: drop the answer.
        return state.go(Step.FINISH, stopped=True)
    if silent:
        logger.debug("silent reply: stored, not sent")
        return state.go(Step.FINISH)
    job = reply_job(turn, turn.turn_id, text, media=turn_reach(state, deps).media, answer=True)
    if streamed is not None:
        job["streamed"] = streamed
    return state.go(Step.DELIVER, deliveries=(job,))


def keep_reply(state: TurnState, deps: TurnDeps) -> str:
    """The chat turn's answer in the transcript at its seq: written | repeated | stopped."""
    turn, reply = state.turn, state.reply
    assert reply is not None and turn.session_id is not None
    if turn.reply_seq is None:
        raise PermanentError("a chat turn without an answer seq")
    row = TranscriptRow(turn.reply_seq, "assistant", reply.text, deps.now(), turn_id=turn.turn_id)
    return deps.transcript.put_reply(turn.session_id, row)


def _cron_jobs(state: TurnState, deps: TurnDeps) -> list[dict[str, Any]]:
    turn, reply = state.turn, state.reply
    assert turn.cron is not None and reply is not None
    run = turn.cron
    origin = None
    if run.origin and run.origin.get("platform") and run.origin.get("chat_id"):
        origin = ReplyTarget.from_dict(run.origin).resolved()
    directory = deps.tool_ports.get("directory")
    media = turn_reach(state, deps).media
    jobs = []
    for i, spec in enumerate(run.deliver or ("origin",)):
        try:
            if directory is None:
                raise UnresolvableTarget("no directory")
            target = resolve_target(spec, origin=origin, home_channels=deps.home_channels(), directory=directory)
        except UnresolvableTarget as exc:
            logger.warning("cron target unresolvable", extra={"turn_id": turn.turn_id, "reason": str(exc)[:120]})
            continue
        jobs.append(
            {
                "delivery_id": f"{turn.turn_id}-t{i}",
                "turn_id": turn.turn_id,
                "target": target.to_dict(deps.settings.served_profile),  # sent by the job's profile's bot
                **answer_fields(reply.text, media),  # no session: no stored file is attached
                "kind": "push",
                "mirror": True,
                "cron": {"job_id": run.job_id, "run_id": run.run_id},
            }
        )
    return jobs


__all__ = ["SILENT_REPLIES", "keep_reply", "reply_job", "respond", "settle"]
