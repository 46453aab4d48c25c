"""How a turn ends: Finish (the workflow's last task), Fail (any task failed after its retries)
and Continue (a turn too long for one execution goes on in the next); and the Respond task that
ends its turn itself (`respond_and_end`), so a turn with nothing more to do is one Lambda task.

A chat turn ends with ONE write to its route (`lifecycle.end_turn`): its tokens and cost are
added to the session's totals and its lease is released, or handed to the messages queued
meanwhile, whose turn starts at once. Every task here is idempotent on the turn: a repeated
finish finds the lease gone (or the same hand-off) and counts nothing twice.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from hermes_gateway.domain.cost import estimate_cost
from hermes_gateway.domain.limits import spender_key
from hermes_gateway.domain.sessions import SessionTally, TokenUsage
from hermes_gateway.domain.turn_state import Reply, Step, TurnKind, TurnState
from hermes_gateway.errors import LeaseLost, PermanentError, TransientError
from hermes_gateway.observability import MetricUnit, logger, metrics
from hermes_gateway.services import lifecycle
from hermes_gateway.services.cron import finish_run
from hermes_gateway.services.turn.context import emit, memory_manager, transcript_messages
from hermes_gateway.services.turn.deps import TurnDeps
from hermes_gateway.services.turn.reach import turn_reach
from hermes_gateway.services.turn.respond import SILENT_REPLIES, keep_reply, reply_job, respond

APOLOGY = "Sorry, something went wrong while I was answering. Please try again in a moment."
# The warning Finish logs when it hands a turn's answer to the asynchronous retries (bench/faults.py reads it)
HANDED_TO_DELIVERY = "delivery failed in the turn; handed to the delivery function"
# The Respond task may run 85 s (infra/statemachines/turn.asl.json); it sends its answer and
# finishes only when it has run less than this, so a send (a platform's answer, the outbox's
# writes, a short rate limit waited out) and the finish fit in the rest.
END_HERE_WITHIN_SECONDS = 45.0


def respond_and_end(state: TurnState, deps: TurnDeps) -> TurnState:
    """The Respond task, ending its turn itself where it can (`deps.deliver`): the answer sent
    from this task (the delivery service in process, through the outbox as the Deliver task
    would) and the turn finished, so a turn with no tool call left is one Lambda task instead of
    three (Respond, Deliver, Finish), and `next` is `done`. Whatever does not succeed here is left
    to the workflow's own task, with its retries: a send that failed goes to Deliver (the outbox
    skips what was sent), a finish that met a TransientError to Finish (idempotent on the turn).
    Tool calls, approvals and continuations keep their states."""
    started = deps.now()
    state = respond(state, deps)
    if deps.deliver is None or state.next not in (Step.DELIVER, Step.FINISH):
        return state
    if deps.now() - started > END_HERE_WITHIN_SECONDS:
        return state  # the model took most of the task's time: the workflow's tasks do the rest
    if state.next is Step.DELIVER:
        state = _deliver_here(state, deps.deliver)
        if state.next is Step.DELIVER:
            return state
    try:
        return finish(state, deps).go(Step.DONE)
    except TransientError as exc:
        logger.warning("the turn is finished by the Finish task", extra={"error": type(exc).__name__})
        return state


def _deliver_here(state: TurnState, deliver: Callable[[Mapping[str, Any]], str]) -> TurnState:
    """The turn's deliveries sent in order; on any failure the Deliver task is left to send them
    (the jobs already sent are skipped there: their chunks are `sent` in the outbox)."""
    outcomes: list[dict[str, Any]] = []
    for job in state.deliveries:
        try:
            outcomes.append({"delivery_id": job.get("delivery_id"), "status": deliver(job)})
        except Exception as exc:  # noqa: BLE001 - the Deliver task tries again, with its retries
            logger.warning("the answer is sent by the Deliver task", extra={"error": type(exc).__name__})
            return state
    return state.go(Step.FINISH, delivered={"deliveries": outcomes})


def _delivered(state: TurnState) -> str | None:
    """What the turn's deliveries came to (`sent`, or each job's outcome), for its line."""
    found = state.delivered.get("deliveries") if isinstance(state.delivered, Mapping) else None
    if not found:
        return None
    statuses = [str(o.get("status")) for o in found if isinstance(o, Mapping)]
    return statuses[0] if len(set(statuses)) == 1 else ",".join(statuses)


def finish(state: TurnState, deps: TurnDeps) -> TurnState:
    turn = state.turn
    status = "stopped" if state.stopped else "ok"
    if state.delivery_error:
        _deliver_later(state, deps)
    released = "none"
    if turn.kind is TurnKind.CHAT:
        released = _finish_chat(state, deps)
    elif turn.kind is TurnKind.CRON and deps.jobs is not None and turn.cron is not None:
        deps.jobs.record_run(turn.cron.job_id, turn.cron.run_id, "ok", None, deps.now())
    elif turn.kind is TurnKind.FLUSH and turn.session_id:
        manager = memory_manager(state, deps) if not state.stopped else None
        if manager is not None:
            manager.on_session_end(transcript_messages(turn, deps))  # external providers see it too
        deps.catalogue.mark_memory_flushed(turn.session_id, deps.now())  # the new session's turn goes on
    latency = max(0.0, deps.now() - turn.started_at)
    metrics.add_metric(name="TurnCompleted", unit=MetricUnit.Count, value=1)
    metrics.add_metric(name="TurnLatency", unit=MetricUnit.Seconds, value=latency)
    # The agent function's one line per message; with no custom metrics (the minimal tier) its
    # seconds and tokens are what Logs Insights charts instead of TurnLatency and ModelTokensOut.
    logger.info(
        "agent:end",
        extra={"turn_id": turn.turn_id, "kind": turn.kind.value, "status": status, "lease": released,
               "iterations": state.loop.iterations, "seconds": round(latency, 2),
               "tokens_out": state.loop.usage.output_tokens,
               **({"delivered": found} if (found := _delivered(state)) else {})},
    )  # fmt: skip
    emit(deps, "agent:end", turn, status=status, iterations=state.loop.iterations)
    return state.go(Step.FINISH)


def tally(state: TurnState, deps: TurnDeps, *, replied: bool) -> SessionTally:
    """What the turn adds to its session: its answer's row, its tokens (a stopped turn's were
    spent all the same) and their estimated cost."""
    reply = state.reply or Reply("", usage=state.loop.usage)
    override = state.turn.model_override
    provider = (override.provider if override else None) or deps.settings.provider.name
    usage = TokenUsage(
        reply.usage.input_tokens,
        reply.usage.output_tokens,
        reply.usage.cache_read_tokens,
        reply.usage.cache_write_tokens,
        reply.prompt_tokens,
    )
    cost = estimate_cost(usage, reply.model, provider)
    return SessionTally(
        message_count=1 if replied else 0,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        last_prompt_tokens=usage.prompt_tokens,
        cost_usd=cost.usd,
        estimated_turns=1 if cost.status == "estimated" else 0,
        unknown_turns=1 if cost.status == "unknown" else 0,
        included_turns=1 if cost.status == "included" else 0,
        prompt_ratio=state.loop.ratio if state.loop.iterations else None,
    )


def _finish_chat(state: TurnState, deps: TurnDeps) -> str:
    turn = state.turn
    replied = state.reply is not None and not state.stopped
    if replied and state.reply is not None:
        manager = memory_manager(state, deps)
        if manager is not None:
            manager.sync_turn(turn.user_text, state.reply.text)
    return _end(state, deps, tally=tally(state, deps, replied=replied), succeeded=not state.stopped)


def _end(
    state: TurnState, deps: TurnDeps, *, tally: SessionTally, succeeded: bool, recovery_failed: bool = False
) -> str:
    turn = state.turn
    if turn.session_key is None or turn.session_id is None or turn.lease_token is None:
        raise PermanentError("a chat turn without its session and lease")
    successor = lifecycle.Successor(
        session_key=turn.session_key,
        session_id=turn.session_id,
        now=deps.now(),
        answer_together=deps.settings.turns.busy_followup == "one",
        model_override=turn.model_override,
        hidden=turn.hidden,
        prompt_ratio=state.loop.ratio if state.loop.iterations else turn.prompt_ratio,
        voice=turn.voice,
    )
    return lifecycle.end_turn(
        deps.leases,
        deps.transcript,
        deps.starter,
        successor,
        turn.lease_token,
        tally=tally,
        succeeded=succeeded,
        recovery_failed=recovery_failed,
        # the user the turn served spent it (BEHAVIOUR §11: their limits count it)
        spender=spender_key(turn.source) if turn.source is not None else None,
    )


def _deliver_later(state: TurnState, deps: TurnDeps) -> None:
    """Deliver failed after its retries (a platform outage): the jobs go to the delivery function
    asynchronously, which retries them twice more and then dead-letters them with an alarm."""
    error = (state.delivery_error or {}).get("Error", "unknown")
    logger.warning(HANDED_TO_DELIVERY, extra={"error": str(error)[:80]})
    for job in state.deliveries:
        deps.deliveries.send(dict(job))


def fail(state: TurnState, deps: TurnDeps) -> TurnState:
    turn = state.turn
    error_name = str((state.error or {}).get("Error", "unknown"))
    logger.error("turn failed", extra={"turn_id": turn.turn_id, "error": error_name, "kind": turn.kind.value})
    metrics.add_metric(name="TurnFailed", unit=MetricUnit.Count, value=1)
    if turn.kind is TurnKind.CRON and turn.cron is not None:
        if deps.jobs is not None:
            # recorded, and told to the job's origin chat once per failure streak
            finish_run(deps.jobs, deps.deliveries, turn.cron.to_json(), "error", error_name[:200], deps.now())
    elif turn.kind is TurnKind.FLUSH and turn.session_id:
        try:
            deps.catalogue.mark_memory_flushed(turn.session_id, deps.now())  # given up: nobody waits on it
        except Exception:  # noqa: BLE001 - the waiting turn stops waiting after its limit anyway
            logger.warning("could not mark a failed memory flush as over", extra={"turn_id": turn.turn_id})
    elif turn.kind is TurnKind.CHAT and error_name != LeaseLost.__name__:
        told = _tell(state, deps)
        # A recovery that failed again counts toward suspension (BEHAVIOUR §5).
        recovery_failed = bool(turn.notes.resumed) and told != "reply"
        _end(
            state,
            deps,
            tally=tally(state, deps, replied=told == "reply"),
            succeeded=False,
            recovery_failed=recovery_failed,
        )
    emit(deps, "agent:end", turn, status="failed", error=error_name[:64])
    return state.go(Step.FINISH)


def _tell(state: TurnState, deps: TurnDeps) -> str:
    """The model's answer if it has one (under its own delivery id: never twice), else one
    apology per turn (its own id); the user's message stays for /retry."""
    turn, reply = state.turn, state.reply
    replies = deps.replies or deps.deliveries
    if reply is None and (kept := _kept_answer(state, deps)) is not None:
        # The task that failed had kept its answer (the Respond task dies after sending it and
        # finishing the turn itself, or before it could send it): that answer, never an apology,
        # under the turn's delivery id, so one already sent is not sent again.
        replies.send(reply_job(turn, turn.turn_id, kept, media=turn_reach(state, deps).media, answer=True))
        return "reply"
    text = (reply.text if reply is not None else "").strip()
    if text and text not in SILENT_REPLIES and not state.stopped:
        if keep_reply(state, deps) != "stopped":
            media = turn_reach(state, deps).media
            replies.send(reply_job(turn, turn.turn_id, reply.text if reply else "", media=media, answer=True))
            return "reply"
        return "stopped"
    if state.stopped or text in SILENT_REPLIES:
        return "none"
    replies.send(reply_job(turn, f"{turn.turn_id}-failed", APOLOGY))
    return "apology"


def _kept_answer(state: TurnState, deps: TurnDeps) -> str | None:
    """This turn's answer if its row is in the transcript at the turn's answer seq (one row read)."""
    turn = state.turn
    if turn.session_id is None or turn.reply_seq is None:
        return None
    found = deps.transcript.window(turn.session_id, upto_seq=turn.reply_seq, limit=1)
    if not found:
        return None
    row = found[-1]
    mine = row.seq == turn.reply_seq and row.role == "assistant" and row.turn_id == turn.turn_id
    return row.content if mine and row.content.strip() not in SILENT_REPLIES else None


def continue_turn(state: TurnState, deps: TurnDeps) -> TurnState:
    """Start the next execution of a long turn from its state (idempotent: named after the count)."""
    turn = state.turn
    loop = replace(state.loop, continuations=state.loop.continuations + 1, exec_started=0.0)
    name = f"{turn.turn_id}-c{loop.continuations}"
    if turn.leased and turn.session_key and turn.lease_token:
        until = deps.now() + deps.settings.sessions.lease_ttl_seconds
        if not deps.leases.extend(turn.session_key, turn.lease_token, until):
            raise LeaseLost("the session's lease is no longer held by this turn")
    deps.starter.start(name, replace(state, loop=loop, next=Step.MODEL, error=None).to_json())
    logger.info("turn continues in a new execution", extra={"turn_id": turn.turn_id, "execution": name})
    return state.go(Step.FINISH)
