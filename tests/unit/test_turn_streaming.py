"""A turn's streamed answer (services/turn/stream.py through the Respond task, in memory): /stop
mid-stream, text before tool calls, platforms that do not stream, and the setting."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hermes_gateway.platforms.base import Target
from hermes_gateway.providers.base import ChatMessage, ModelReply, TextSoFar, ToolSpec
from hermes_gateway.services.turn.stream import row_id
from tests.fakes.engine import Engine, ToolModel, tool
from tests.fakes.services import FakeOutbox


class Chat:
    """A platform that posts and edits (an Editor)."""

    def __init__(self) -> None:
        self.posts: list[str] = []
        self.edits: list[tuple[str, str]] = []

    def send(self, target: Target, text: str) -> str:
        self.posts.append(text)
        return f"m{len(self.posts)}"

    def edit(self, target: Target, message_id: str, text: str) -> None:
        self.edits.append((message_id, text))


class PostOnly:
    def send(self, target: Target, text: str) -> str:
        raise AssertionError("a platform that cannot edit is never streamed to")


class StreamingModel(ToolModel):
    """The ToolModel's script, handed over a word a second on the world's clock; `during(i)` runs
    after the i-th piece."""

    def __init__(self, world_clock: list[float], *script: Any, during: Any = None, preface: str = "") -> None:
        super().__init__(*script)
        self.clock, self.during, self.preface = world_clock, during, preface

    def stream(
        self, system: str, messages: list[ChatMessage], tools: list[ToolSpec] | None, on_text: TextSoFar
    ) -> ModelReply:
        reply = self.complete(system, messages, tools)
        if reply.tool_calls and self.preface:  # text before the calls
            reply = replace(reply, text=self.preface)
        words = reply.text.split(" ")
        for i in range(1, len(words) + 1):
            self.clock[0] += 1.0
            on_text(" ".join(words[:i]))
            if self.during is not None:
                self.during(i)
        return reply


def world(
    *script: Any, sender: Any = None, during: Any = None, env: dict[str, str] | None = None, preface: str = ""
) -> Any:
    clock = [0.0]
    model = StreamingModel(clock, *script, during=during, preface=preface)
    engine = Engine(env, model=model, tools=[tool("lookup", lambda args, ctx: "found")])
    chat, outbox = sender or Chat(), FakeOutbox()
    engine.overrides.update(senders=lambda p, via: chat, outbox=outbox, monotonic=lambda: clock[0])
    return engine, chat, outbox


LONG = " ".join(f"w{i}" for i in range(12))


def test_a_streamed_answer_leaves_the_deliver_state_its_job_marked_shown() -> None:
    engine, chat, outbox = world(LONG)
    engine.send("question", "e0")
    state = engine.step("respond", engine.starter.started[engine.first()])
    assert state["next"] == "deliver"
    job = state["deliveries"][0]
    assert job["streamed"] == "shown" and job["text"] == LONG
    assert chat.posts and chat.edits[-1] == ("m1", LONG)
    assert outbox.entries[row_id(job["turn_id"])].status == "streaming"


def test_stop_mid_stream_ends_it_with_what_was_said() -> None:
    engine: Engine
    edits_before: list[int] = []

    def stop_at(i: int) -> None:
        if i == 6:
            edits_before.append(len(chat.edits))
            engine.send("/stop", "e1")

    engine, chat, outbox = world(LONG, during=stop_at)
    engine.send("question", "e0")
    state = engine.step("respond", engine.starter.started[engine.first()])

    assert state["next"] == "finish" and state["stopped"]
    assert len(chat.posts) == 1
    shown = chat.edits[-1][1] if chat.edits else chat.posts[0]
    assert shown != LONG and LONG.startswith(shown)  # it stopped where it was
    assert len(chat.edits) - edits_before[0] <= 3  # whether /stop came is asked every 3 s
    row = outbox.entries[row_id(state["turn"]["turn_id"])]
    assert row.status == "sent" and row.platform_message_id == "m1"
    engine.step("finish", state)
    assert engine.texts() == []


def test_text_before_tool_calls_is_replaced_by_the_answer_in_the_same_message() -> None:
    engine, chat, outbox = world(
        [("lookup", {})], LONG, preface="Let me check", env={"TELEGRAM_STREAMING_FIRST_AFTER": "0"}
    )
    engine.send("question", "e0")
    state = engine.step("respond", engine.starter.started[engine.first()])
    assert state["next"] == "tools" and chat.posts == ["Let"] and chat.edits[-1] == ("m1", "Let me check")
    state = engine.step("tools", state)
    state = engine.step("respond", state)

    assert state["next"] == "deliver" and state["deliveries"][0]["streamed"] == "shown"
    assert len(chat.posts) == 1 and chat.edits[-1] == ("m1", LONG)
    assert outbox.writes == ["record_claimed"]


def test_a_platform_that_cannot_edit_is_answered_as_before() -> None:
    engine, _, outbox = world(LONG, sender=PostOnly())
    engine.send("question", "e0")
    state = engine.step("respond", engine.starter.started[engine.first()])
    assert "streamed" not in state["deliveries"][0] and outbox.writes == []


def test_streaming_off_answers_as_before() -> None:
    engine, chat, outbox = world(LONG, env={"TELEGRAM_STREAMING": "false"})
    engine.send("question", "e0")
    state = engine.step("respond", engine.starter.started[engine.first()])
    assert "streamed" not in state["deliveries"][0] and chat.posts == [] and outbox.writes == []


class AskedControl:
    """The turn control, noting how each look at the route's state was asked for."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.asked = inner, list[bool]()

    def state(self, session_key: str, *, consistent: bool = True) -> Any:
        self.asked.append(consistent)
        return self.inner.state(session_key, consistent=consistent)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_the_looks_for_stop_while_streaming_are_eventually_consistent_reads() -> None:
    engine, _, _ = world(LONG)
    control = AskedControl(engine.stores.control)
    engine.overrides.update(control=control)
    engine.send("question", "e0")
    engine.step("respond", engine.starter.started[engine.first()])
    assert len(control.asked) >= 3 and not any(control.asked)  # 12 s of writing: a look every 3 s


def test_only_a_retry_or_a_later_model_call_reads_the_streamed_row_consistently() -> None:
    # the first try of the first model call: eventually consistent (only a repeated execution
    # could have posted); its retry, and the model call after the tools, consistently
    engine, _, outbox = world(
        [("lookup", {})], LONG, preface="Let me check", env={"TELEGRAM_STREAMING_FIRST_AFTER": "0"}
    )
    engine.send("question", "e0")
    started = engine.starter.started[engine.first()]
    state = engine.step("respond", started)
    state = engine.step("respond", engine.step("tools", state))
    assert outbox.reads == ["get eventually", "get"]

    engine, _, outbox = world(LONG)
    engine.send("question", "e0")
    engine.step("respond", engine.starter.started[engine.first()], retry=1)
    assert outbox.reads == ["get"]
