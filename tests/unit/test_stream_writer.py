"""The streamed answer's writer (services/turn/stream.py) on a clock the test moves: when it
posts, how often it edits, what it shows, the one outbox write, and what a retry finds."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from hermes_gateway.errors import PermanentError, RateLimited, TransientError
from hermes_gateway.platforms.base import Target
from hermes_gateway.services.delivery import DeliveryDeps, DeliveryJob, deliver
from hermes_gateway.services.turn.stream import (
    FIRST_CHARS,
    PARTIAL,
    SHOWN,
    Pace,
    StreamStopped,
    StreamWriter,
    pace_for,
    row_id,
    shown_text,
)
from tests.fakes.services import FakeOutbox

NOW = 1_764_400_000.0


class Chat:
    """A platform that posts and edits, recording each call with the clock's time."""

    def __init__(self, clock: list[float]) -> None:
        self.clock = clock
        self.calls: list[tuple[str, float, str]] = []
        self.texts: dict[str, str] = {}
        self.fail: list[Exception] = []

    def send(self, target: Target, text: str) -> str:
        if self.fail:
            raise self.fail.pop(0)
        message_id = str(len(self.texts) + 1)
        self.texts[message_id] = text
        self.calls.append(("post", self.clock[0], text))
        return message_id

    def edit(self, target: Target, message_id: str, text: str) -> None:
        if self.fail:
            raise self.fail.pop(0)
        self.texts[message_id] = text
        self.calls.append(("edit", self.clock[0], text))


def writer(chat: Chat, outbox: FakeOutbox, clock: list[float], earlier_try: bool = True, **kw: Any) -> StreamWriter:
    def sleep(seconds: float) -> None:
        clock[0] += seconds

    return StreamWriter(
        sender=chat,
        poster=chat,
        target=Target("telegram", "99"),
        rows=outbox,
        turn_id="turn-1",
        limit=kw.pop("limit", 4096),
        pace=kw.pop("pace", Pace(first_after=1.5, interval=1.0)),
        clock=lambda: clock[0],
        sleep=sleep,
        wall=lambda: NOW,
        **kw,
    ).open(earlier_try=earlier_try)


def feed(stream: StreamWriter, clock: list[float], words: list[str], every: float) -> str:
    text = ""
    for word in words:
        clock[0] += every
        text += word
        stream.on_text(text)
    return text


def test_the_answer_is_posted_after_first_after_then_edited_at_the_pace_to_the_exact_text() -> None:
    clock, outbox = [100.0], FakeOutbox()
    chat = Chat(clock)
    stream = writer(chat, outbox, clock)
    text = feed(stream, clock, [f"w{i} " for i in range(50)], every=0.1)  # 5 s of writing
    done = clock[0]
    assert stream.finish(text + "end") == SHOWN

    kinds = [kind for kind, _, _ in chat.calls]
    assert kinds[0] == "post" and kinds.count("post") == 1 and kinds.count("edit") >= 3
    times = [at for _, at, _ in chat.calls]
    assert times[0] == pytest.approx(101.5, abs=0.11)  # the first delta once 1.5 s have passed
    # the edits while the model writes keep the pace; the last one is made at once when it is done
    assert all(later - earlier >= 1.0 - 1e-9 for earlier, later in itertools.pairwise(times[:-1]))
    assert times[-1] == clock[0] == done and times[-1] - times[-2] < 1.0
    assert chat.texts["1"] == text + "end"
    # one outbox write: the message's row, `streaming`, with the platform's id
    assert outbox.writes == ["record_claimed"]
    row = outbox.entries[row_id("turn-1")]
    assert (row.status, row.platform_message_id, row.chunk) == ("streaming", "1", 1)


def test_in_a_paced_chat_the_post_waits_for_the_chats_next_send_slot() -> None:
    # The group's next slot is 2 s off when the stream would first post (at 101.5)
    clock, outbox = [100.0], FakeOutbox()
    chat, asked = Chat(clock), list[float]()

    def slot() -> float:
        asked.append(clock[0])
        return max(0.0, 103.5 - clock[0])

    stream = writer(chat, outbox, clock, slot=slot)
    text = feed(stream, clock, [f"w{i} " for i in range(50)], every=0.1)
    stream.finish(text)
    assert chat.calls[0][0] == "post" and chat.calls[0][1] == pytest.approx(103.5, abs=0.11)
    assert len(asked) == 2  # asked when it would post, then once the slot had come: no asking in between


def test_a_quick_answer_is_never_posted_by_the_stream() -> None:
    clock, outbox = [0.0], FakeOutbox()
    chat = Chat(clock)
    stream = writer(chat, outbox, clock)
    text = feed(stream, clock, ["Hello ", "there"], every=0.1)
    assert stream.finish(text) is None
    assert chat.calls == [] and outbox.writes == []


def test_enough_text_is_posted_before_first_after() -> None:
    clock, outbox = [0.0], FakeOutbox()
    chat = Chat(clock)
    stream = writer(chat, outbox, clock)
    feed(stream, clock, ["x" * (FIRST_CHARS + 1)], every=0.01)
    assert [kind for kind, _, _ in chat.calls] == ["post"]


def test_a_silent_answer_in_the_making_is_never_posted() -> None:
    clock, outbox = [0.0], FakeOutbox()
    chat = Chat(clock)
    stream = writer(chat, outbox, clock, pace=Pace(0.0, 1.0))
    feed(stream, clock, ["NO", "_REP", "LY"], every=1.0)
    assert chat.calls == []


def test_only_the_first_chunk_is_shown_and_media_lines_never() -> None:
    assert shown_text("Here\nMEDIA:https://x/y.png\nmore", 4096) == "Here\n\nmore"  # as the job's text
    assert shown_text("Here\nMED", 4096) == "Here\n"
    assert len(shown_text("word " * 2000, 4096)) <= 4096


def test_a_retry_finds_the_message_posted_before_and_edits_it() -> None:
    clock, outbox = [0.0], FakeOutbox()
    chat = Chat(clock)
    first = writer(chat, outbox, clock, earlier_try=False)
    feed(first, clock, [f"w{i} " for i in range(20)], every=0.1)  # posted, then the task fails
    assert [kind for kind, _, _ in chat.calls][:1] == ["post"]

    again = writer(chat, outbox, clock)  # the retried task
    assert again.message_id == "1"
    # the first try read the row eventually consistently (none could be there but a repeated
    # execution's), the retry consistently (its own first try's may be)
    assert outbox.reads == ["get eventually", "get"]
    text = feed(again, clock, [f"w{i} " for i in range(30)], every=0.1)
    assert again.finish(text) == SHOWN
    assert [kind for kind, _, _ in chat.calls].count("post") == 1
    assert chat.texts == {"1": text}
    assert outbox.writes == ["record_claimed"]


def test_failed_edits_cost_the_answer_nothing_and_a_rate_limit_is_waited_out() -> None:
    clock, outbox = [0.0], FakeOutbox()
    chat = Chat(clock)
    stream = writer(chat, outbox, clock, pace=Pace(0.0, 1.0))
    stream.on_text("Hello")
    chat.fail = [RateLimited(5.0, "slow down"), TransientError("502")]
    clock[0] += 1.0
    stream.on_text("Hello there")  # rate limited: no edit for 5 s
    clock[0] += 2.0
    stream.on_text("Hello there you")
    assert [k for k, _, _ in chat.calls] == ["post"]
    clock[0] += 4.0
    stream.on_text("Hello there you all")  # a 502: skipped
    clock[0] += 1.0
    stream.on_text("Hello there you all!")
    assert chat.calls[-1][0] == "edit" and chat.texts["1"] == "Hello there you all!"
    chat.fail = [PermanentError("message deleted")]
    clock[0] += 1.0
    stream.on_text("Hello there you all!!")
    assert stream.closed
    assert stream.finish("Hello there you all!!!") == PARTIAL  # the Deliver state edits it


def test_stop_ends_the_stream() -> None:
    clock, outbox = [0.0], FakeOutbox()
    chat = Chat(clock)
    stopped = [False]
    stream = writer(chat, outbox, clock, pace=Pace(0.0, 1.0), stopped=lambda: stopped[0])
    feed(stream, clock, ["a ", "b "], every=1.0)
    stopped[0] = True
    with pytest.raises(StreamStopped):
        feed(stream, clock, ["c "] * 5, every=1.0)
    stream.close()
    assert outbox.entries[row_id("turn-1")].status == "sent"


def test_the_pace_by_chat_type() -> None:
    assert pace_for(0.0, 1.5, "dm") == Pace(1.5, 1.0)
    assert pace_for(0.0, 1.5, "group") == Pace(1.5, 3.0)
    assert pace_for(2.0, 0.5, "dm") == Pace(0.5, 2.0)


class Editing:
    def __init__(self) -> None:
        self.posts: list[str] = []
        self.edits: list[tuple[str, str]] = []

    def send(self, target: Target, text: str) -> str:
        self.posts.append(text)
        return f"m{len(self.posts) + 1}"

    def edit(self, target: Target, message_id: str, text: str) -> None:
        self.edits.append((message_id, text))


@pytest.mark.parametrize(
    ("streamed", "edits", "writes"),
    [
        # shown: the row becomes sent in one conditional write, with no record of the chunk first
        ("shown", [], ["complete_stream"]),
        # partial: the chunk's record finds the row (its failed condition is billed), an edit, the mark
        ("partial", [("m1", "the whole answer")], ["record_claimed", "mark"]),
    ],
)
def test_delivery_completes_the_streamed_row_and_never_posts_it_again(
    streamed: str, edits: list[Any], writes: list[str]
) -> None:
    outbox, platform = FakeOutbox(), Editing()
    outbox.record_claimed(
        "turn-1#1", platform="telegram", chat_id="99", thread_id=None, text="the whole", turn_id="turn-1",
        chunk=1, chunks=1, now=NOW, status="streaming", platform_message_id="m1",
    )  # fmt: skip
    deps = DeliveryDeps(outbox=outbox, sender_for=lambda p, via: platform, now=lambda: NOW)
    job = {"delivery_id": "turn-1", "turn_id": "turn-1", "target": {"platform": "telegram", "chat_id": "99"}}
    outbox.writes.clear()
    result = deliver(DeliveryJob.from_dict({**job, "text": "the whole answer", "streamed": streamed}), deps)

    assert (result.status, result.sent_chunks) == ("sent", 1)
    assert platform.posts == [] and platform.edits == edits
    assert outbox.entries["turn-1#1"].status == "sent" and outbox.writes == writes
    # a repeated job sends nothing
    deliver(DeliveryJob.from_dict({**job, "text": "the whole answer", "streamed": streamed}), deps)
    assert platform.posts == [] and platform.edits == edits


def test_a_platform_with_an_edit_budget_keeps_its_last_edit_for_the_exact_text() -> None:
    clock, outbox = [0.0], FakeOutbox()
    chat = Chat(clock)
    chat.max_edits = 3  # type: ignore[attr-defined]  # as Feishu's 20
    stream = writer(chat, outbox, clock, pace=Pace(0.0, 1.0))
    text = feed(stream, clock, [f"w{i} " for i in range(10)], every=1.0)
    assert stream.finish(text + "end") == SHOWN
    assert [k for k, _, _ in chat.calls] == ["post", "edit", "edit", "edit"]
    assert chat.texts["1"] == text + "end"


class ThrottledOutbox(FakeOutbox):
    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def record_claimed(self, delivery_id: str, **kw: Any) -> Any:
        if self.failures:
            self.failures -= 1
            raise TransientError("throttled")
        return super().record_claimed(delivery_id, **kw)


def test_a_row_write_that_fails_at_the_first_post_is_made_at_the_end_and_nothing_is_posted_twice() -> None:
    clock, outbox = [0.0], ThrottledOutbox(failures=3)  # all three tries at the first post
    chat = Chat(clock)
    stream = writer(chat, outbox, clock, pace=Pace(0.0, 1.0))
    text = feed(stream, clock, [f"w{i} " for i in range(5)], every=1.0)
    assert stream.finish(text) == SHOWN
    assert [k for k, _, _ in chat.calls].count("post") == 1
    assert outbox.entries[row_id("turn-1")].platform_message_id == "1"


def test_a_stop_check_that_fails_is_no_stop() -> None:
    clock, outbox = [0.0], FakeOutbox()
    chat = Chat(clock)

    def throttled() -> bool:
        raise TransientError("throttled")

    stream = writer(chat, outbox, clock, pace=Pace(0.0, 1.0), stopped=throttled)
    text = feed(stream, clock, [f"w{i} " for i in range(8)], every=1.0)
    assert stream.finish(text) == SHOWN
