"""Delivery's failure policy, gone targets, unknown outcomes, events and mirroring (BEHAVIOUR §6)."""

from __future__ import annotations

from typing import Any

import pytest

from hermes_gateway.domain.ports import SessionStores
from hermes_gateway.domain.session_key import build_session_key
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.errors import OutcomeUnknown, PermanentError, RateLimited, TargetGone, TransientError
from hermes_gateway.services.delivery import (
    INLINE_RATE_LIMIT_SECONDS,
    MIRROR_PREFIX,
    DeliveryDeps,
    DeliveryJob,
    Mirror,
    Undeliverable,
    deliver,
    deliver_waiting,
    preview,
)
from tests.fakes.services import FakeDirectory, FakeEvents, FakeOutbox, FakeSender
from tests.fakes.sessions import memory_stores, seed

NOW = 1_764_400_000.0


def job(text: str = "hello", *, kind: str = "reply", mirror: bool = False, chat_id: str = "99") -> DeliveryJob:
    return DeliveryJob.from_dict(
        {
            "delivery_id": "job-1",
            "turn_id": None,
            "target": {"platform": "telegram", "chat_id": chat_id, "thread_id": None},
            "text": text,
            "kind": kind,
            "mirror": mirror,
        }
    )


def deps(sender: FakeSender, **extra: Any) -> DeliveryDeps:
    return DeliveryDeps(
        outbox=extra.pop("outbox", FakeOutbox()),
        sender_for=lambda platform, via: sender,
        now=lambda: NOW,
        events=extra.pop("events", FakeEvents()),
        targets=extra.pop("targets", FakeDirectory()),
        **extra,
    )


def test_a_refusal_is_undeliverable_and_marked_failed() -> None:
    d = deps(FakeSender(fail_on={1}, error=PermanentError("bad request")))
    with pytest.raises(Undeliverable, match="bad request"):
        deliver(job(), d)
    assert d.outbox.entries["job-1#1"].status == "failed"  # type: ignore[attr-defined]


@pytest.mark.parametrize("error", [TransientError("502"), RateLimited(3.0)])
def test_transient_failures_are_raised_for_a_retry(error: Exception) -> None:
    d = deps(FakeSender(fail_on={1}, error=error))
    with pytest.raises(type(error)):
        deliver(job(), d)


def test_a_gone_target_is_recorded_and_pushes_skip_it_until_a_send_succeeds() -> None:
    directory, events, outbox = FakeDirectory(), FakeEvents(), FakeOutbox()
    gone = FakeSender(fail_on={1}, error=TargetGone("bot was blocked"))
    result = deliver(job("reply"), deps(gone, targets=directory, events=events, outbox=outbox))
    assert result.status == "gone"
    assert outbox.entries["job-1#1"].status == "gone"
    assert directory.gone == {("telegram", "99", None): "bot was blocked"}
    assert events.emitted[-1][0] == "delivery:failed" and events.emitted[-1][1]["reason"] == "target_gone"

    # A push to it is skipped without a send attempt
    sender = FakeSender()
    pushed = deliver(
        DeliveryJob.from_dict({**_dict(job()), "delivery_id": "job-2", "kind": "push"}),
        deps(sender, targets=directory),
    )
    assert pushed.status == "skipped" and sender.attempts == 0

    # A reply (the user wrote again) is still attempted
    ok = FakeSender()
    reply = deliver(DeliveryJob.from_dict({**_dict(job()), "delivery_id": "job-4"}), deps(ok, targets=directory))
    assert reply.status == "sent" and ok.attempts == 1
    push = deliver(
        DeliveryJob.from_dict({**_dict(job()), "delivery_id": "job-5", "kind": "push"}), deps(ok, targets=directory)
    )
    assert push.status == "skipped"  # a reply does not clear it: only a push that got through does


def _dict(j: DeliveryJob) -> dict[str, Any]:
    return {
        "delivery_id": j.delivery_id,
        "target": {"platform": j.platform, "chat_id": j.chat_id, "thread_id": j.thread_id},
        "text": j.text,
        "kind": j.kind,
    }


def test_a_successful_push_clears_a_stale_gone_mark() -> None:
    directory, sender = FakeDirectory(), FakeSender()
    directory.gone[("telegram", "99", None)] = "blocked"
    directory.gone_reason = lambda *a: None  # type: ignore[method-assign]  # the mark has expired
    deliver(job(kind="push"), deps(sender, targets=directory))
    assert directory.gone == {}


def test_an_unknown_outcome_is_recorded_and_never_sent_again() -> None:
    outbox = FakeOutbox()
    sender = FakeSender(fail_on={1}, error=OutcomeUnknown("200 without a message id"))
    first = deliver(job("a"), deps(sender, outbox=outbox))
    assert first.status == "unknown" and outbox.entries["job-1#1"].status == "unknown"
    again = deliver(job("a"), deps(sender, outbox=outbox))  # a redelivery or a redrive
    assert again.status == "unknown" and sender.attempts == 1


def test_sent_and_failed_events_carry_no_message_text() -> None:
    events = FakeEvents()
    deliver(job("secret words"), deps(FakeSender(), events=events))
    ((name, detail),) = events.emitted
    assert name == "delivery:sent" and "secret words" not in str(detail)


def test_a_short_rate_limit_is_waited_out_in_the_function_and_the_chunk_sent_once() -> None:
    # Given a platform that answers the first send with a 429 asking for 2 s
    slept: list[float] = []
    sender = FakeSender(fail_on={1}, error=RateLimited(2.0))
    d = deps(sender, sleep=slept.append)
    # When the job is delivered with time to wait
    result = deliver_waiting(job(), d, budget_seconds=10)
    # Then the function waited as asked and sent the chunk on its second try
    assert slept == [2.0] and result.status == "sent" and sender.attempts == 2
    assert d.outbox.entries["job-1#1"].status == "sent"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("retry_after", "budget"),
    [(INLINE_RATE_LIMIT_SECONDS + 1, 60.0), (2.0, 1.0)],
    ids=["longer than the function waits", "more than the budget left"],
)
def test_a_long_rate_limit_is_raised_for_the_caller_to_retry(retry_after: float, budget: float) -> None:
    slept: list[float] = []
    d = deps(FakeSender(fail_on={1}, error=RateLimited(retry_after)), sleep=slept.append)
    with pytest.raises(RateLimited):
        deliver_waiting(job(), d, budget_seconds=budget)
    assert slept == []
    assert d.outbox.entries["job-1#1"].status == "failed"  # type: ignore[attr-defined]


def test_a_long_chunk_keeps_a_preview_in_the_outbox_and_is_sent_whole() -> None:
    # Given a chunk of 3000 characters, deployed (the outbox keeps a preview)
    sender = FakeSender()
    d = deps(sender)
    deliver(job("x" * 3000), d)
    stored = d.outbox.entries["job-1#1"].text  # type: ignore[attr-defined]
    # Then the platform got all of it, the row a bounded preview
    assert len(sender.sent[0][1]) == 3000
    assert stored.startswith("x" * 100) and len(stored.encode()) <= 605
    # Local mode keeps the whole text (its outbox page shows it)
    whole = deps(FakeSender(), outbox_text_chars=None)
    deliver(job("x" * 3000), whole)
    assert whole.outbox.entries["job-1#1"].text == "x" * 3000  # type: ignore[attr-defined]


def test_a_preview_of_wide_characters_is_cut_on_a_character_within_its_byte_cap() -> None:
    text = "\u6f22" * 400  # 3 bytes each in UTF-8
    cut = preview(text, 300)
    assert len(cut.encode()) <= 603 and cut.rstrip("\u2026") == "\u6f22" * len(cut.rstrip("\u2026"))
    assert preview("short", 300) == "short" and preview(text, None) == text


# --- mirror ---------------------------------------------------------------------------------


def dm_session(stores: SessionStores, *texts: str, roles: tuple[str, ...] = (), chat_id: str = "99") -> str:
    source = SessionSource("telegram", chat_id=chat_id, chat_type="dm", user_id=chat_id)
    return seed(stores, source, build_session_key(source), *texts, now=NOW, roles=roles)


def mirror_of(stores: SessionStores) -> Mirror:
    return Mirror(stores.routes, stores.leases, stores.transcript)


def test_a_pushed_message_is_mirrored_as_the_assistant() -> None:
    stores = memory_stores()
    session_id = dm_session(stores, "remind me")
    deliver(job("Reminder: stretch", kind="push", mirror=True), deps(FakeSender(), sessions=mirror_of(stores)))
    rows = stores.transcript.rows(session_id)
    assert [(r.role, r.content) for r in rows][-1] == ("assistant", "Reminder: stretch")


def test_after_an_assistant_row_the_mirror_is_a_marked_user_line_and_written_once() -> None:
    stores = memory_stores()
    session_id = dm_session(stores, "earlier answer", roles=("assistant",))
    outbox = FakeOutbox()
    for _ in range(2):  # a redelivered job mirrors once
        deliver(
            job("Cron result", kind="push", mirror=True), deps(FakeSender(), sessions=mirror_of(stores), outbox=outbox)
        )
    rows = stores.transcript.rows(session_id)
    assert [(r.role, r.content) for r in rows][1:] == [("user", f"{MIRROR_PREFIX} Cron result")]


def test_nothing_is_mirrored_without_a_single_matching_session() -> None:
    stores = memory_stores()
    deliver(job("to a chat never seen", kind="push", mirror=True), deps(FakeSender(), sessions=mirror_of(stores)))
    assert stores.routes.get("agent:main:telegram:dm:99") is None
