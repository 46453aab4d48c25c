"""Context that never overflows (BEHAVIOUR §10): every model request is sized to the model's
window less the answer's reserve, and a long session is compressed into a summary and its recent
rows, the parent keeping its whole transcript."""

from __future__ import annotations

import pytest

from hermes_gateway.domain.context import (
    CUT_NOTE,
    FALLBACK_WINDOW,
    calibrated,
    cut,
    default_output_tokens,
    default_window,
    message_tokens,
    request_tokens,
    text_tokens,
)
from hermes_gateway.domain.session_key import key_namespace
from hermes_gateway.errors import Conflict, PermanentError
from hermes_gateway.providers.base import ChatMessage, ImagePart, ModelReply, ToolSpec
from hermes_gateway.services.turn.compaction import COMPRESSED_REPLY, NOTHING_REPLY, SUMMARY_PROMPT, summarize
from hermes_gateway.services.turn.context import SUMMARY_HEAD, fit
from hermes_gateway.settings import rules_from_settings
from hermes_gateway.settings.sections import ProviderSettings
from tests.fakes.dynamo import session_tables_client
from tests.fakes.engine import Engine, ToolModel
from tests.fakes.sessions import memory_stores

FILLER = "The weather report went on about clouds and wind over the hills for a long while. " * 7


# -- the estimate ------------------------------------------------------------------------------


def test_the_estimate_is_four_characters_a_token_plus_framing_and_a_fixed_cost_per_image() -> None:
    assert text_tokens("") == 0
    assert text_tokens("abcd") == 1
    assert text_tokens("abcde") == 2
    plain = message_tokens(ChatMessage("user", "x" * 400))
    assert plain == 104  # 100 for the text, 4 for the message
    image = ImagePart("image/png", b"\x89PNG" * 10_000)
    assert message_tokens(ChatMessage("user", "x" * 400, images=(image,))) == plain + 1_000
    spec = ToolSpec("memory", "remember things", {"type": "object"})
    assert request_tokens("s" * 40, [ChatMessage("user", "x" * 400)], [spec]) > 10 + plain


def test_calibration_is_the_reported_over_the_estimated_tokens_clamped() -> None:
    assert calibrated(1.0, 1_500, 1_000) == 1.5
    assert calibrated(1.0, 10_000, 1_000) == 3.0
    assert calibrated(1.0, 10, 1_000) == 0.5
    assert calibrated(1.7, 0, 1_000) == 1.7  # nothing reported: unchanged


@pytest.mark.parametrize(
    ("model", "window"),
    [
        ("gpt-4o-mini", 128_000),
        ("gpt-4.1-nano", 128_000),
        ("gpt-4", 8_192),
        ("us.anthropic.claude-3-5-sonnet-20241022-v2:0", 200_000),
        ("anthropic.claude-3-haiku-20240307-v1:0", 200_000),
        ("meta.llama3-8b-instruct-v1:0", 8_192),
        ("meta.llama3-1-70b-instruct-v1:0", 128_000),
        ("ollama/llama3.1", 128_000),
        ("some-new-model", FALLBACK_WINDOW),
        ("", FALLBACK_WINDOW),
    ],
)
def test_the_default_window_comes_from_a_table_of_model_name_prefixes(model: str, window: int) -> None:
    assert default_window(model) == window


def test_the_answer_reserve_is_a_quarter_of_the_window_at_most_4096() -> None:
    assert default_output_tokens(2_000) == 500
    assert default_output_tokens(128_000) == 4_096
    settings = ProviderSettings(model="claude-3-haiku")
    assert (settings.window, settings.output_reserve) == (200_000, 4_096)
    chosen = ProviderSettings(model="gpt-4o", context_window=2_000, max_output_tokens=300)
    assert (chosen.window, chosen.output_reserve) == (2_000, 300)


# -- choosing the history ----------------------------------------------------------------------


def _turns(count: int, size: int) -> list[ChatMessage]:
    return [ChatMessage("user" if i % 2 == 0 else "assistant", f"{i}:" + "x" * size) for i in range(count)]


def test_the_history_is_chosen_newest_first_by_size() -> None:
    messages = _turns(9, 396)  # about 104 tokens each
    kept = fit(messages, 450)
    assert kept == messages[-3:]  # four would not fit; it starts at a user message
    assert sum(message_tokens(m) for m in kept) <= 450
    assert fit(messages, None) == messages


def test_long_messages_push_older_ones_out() -> None:
    short = _turns(9, 8)
    assert fit(short, 450) == short
    long_tail = [*short[:-1], ChatMessage("user", "y" * 1_600)]  # 404 tokens; the short ones 7 each
    assert fit(long_tail, 450) == long_tail[2:]  # 404 + 6 * 7 fit, a seventh would not


def test_a_message_larger_than_the_room_is_cut_with_a_note_never_sent_whole() -> None:
    huge = ChatMessage("user", "z" * 50_000)
    (kept,) = fit([ChatMessage("user", "old"), ChatMessage("assistant", "reply"), huge], 500)
    assert message_tokens(kept) <= 500
    over = len(huge.content) - kept.content.index("\n")
    assert kept.content.endswith(CUT_NOTE.format(over=over))
    assert cut(ChatMessage("user", "small"), 500) == ChatMessage("user", "small")


def test_max_history_messages_still_bounds_the_rows_sent() -> None:
    engine = Engine({"GATEWAY_MAX_HISTORY_MESSAGES": "3", "GATEWAY_CONTEXT_WINDOW": "100000"})
    for i in range(4):
        engine.send(f"message {i}", f"e{i}")
        engine.pump()
    _, messages, _ = engine.model.requests[-1]
    assert [m.content for m in messages] == ["message 2", "re: message 2", "message 3"]


def test_a_summary_too_large_for_one_request_is_made_in_parts_then_of_the_parts() -> None:
    model = SmallModel(window=2_000)
    messages = [ChatMessage("user", f"FACT {i}: item {i}\n{FILLER}") for i in range(12)]
    summary, usage = summarize(model, messages, 1_000)
    assert model.summaries > 2  # the parts, then their summaries
    assert max(model.sizes) <= 1_000 + 60  # each part within the room (and the instruction)
    assert all(f"FACT {i}:" in summary for i in range(12))
    assert usage.input_tokens > 0


# -- a long session against a small window -----------------------------------------------------


class SmallModel(ToolModel):
    """A model with a small window: refuses (as a 400 would) any request larger than it by its
    own estimate. Its summaries repeat the FACT lines it was given; its answers say which FACT
    lines it can see."""

    name = "small"

    def __init__(self, window: int) -> None:
        super().__init__()
        self.window = window
        self.sizes: list[int] = []
        self.summaries = 0

    def complete(self, system: str, messages: list[ChatMessage], tools: list[ToolSpec] | None = None) -> ModelReply:
        size = request_tokens(system, messages, tools)
        self.sizes.append(size)
        self.requests.append((system, list(messages), tools))
        if size > self.window:
            raise PermanentError(f"400: the request has {size} tokens, the window {self.window}")
        facts = [line for m in messages for line in m.content.splitlines() if line.startswith("FACT")]
        last = messages[-1].content
        if last.endswith(SUMMARY_PROMPT):
            self.summaries += 1
            return ModelReply("\n".join(dict.fromkeys(facts)) or "small talk", self.name, size, 20)
        if "what do you know" in last:
            return ModelReply("I know: " + "; ".join(dict.fromkeys(facts)), self.name, size, 20)
        return ModelReply(f"noted {last.splitlines()[0]}", self.name, size, 5)


def _long_session(engine: Engine) -> list[str]:
    sent = []
    for i in range(1, 41):
        head = "FACT: my cat is called Miso" if i == 1 else f"message {i}"
        text = "what do you know about me?" if i == 40 else f"{head}\n{FILLER}"
        sent.append(text)
        engine.send(text, f"e{i}")
        engine.pump()
        engine.clock += 60
    return sent


def _chain(engine: Engine, first: str) -> list[str]:
    chain, current = [first], engine.stores.catalogue.get_session(first)
    while current is not None and current.continued_in:
        chain.append(current.continued_in)
        current = engine.stores.catalogue.get_session(current.continued_in)
    return chain


def test_a_40_message_session_never_overflows_a_small_window_and_loses_nothing() -> None:
    engine = Engine({"GATEWAY_CONTEXT_WINDOW": "2000"}, model=SmallModel(window=2_000))
    model = engine.model
    assert isinstance(model, SmallModel)
    engine.send("hello", "e0")
    engine.pump()
    first = engine.route().session_id
    sent = _long_session(engine)

    assert max(model.sizes) <= 2_000 - 500  # the window less the answer's reserve, every request
    assert model.summaries >= 1
    chain = _chain(engine, first)
    assert len(chain) > 1 and chain[-1] == engine.route().session_id
    # The fact of the first message is still known at the end: the summaries carried it.
    assert "FACT: my cat is called Miso" in engine.texts()[-1]
    # Nothing is lost: every user message is in the transcripts of the sessions compressed.
    kept: set[str] = set()
    for session_id in chain:
        info = engine.stores.catalogue.get_session(session_id)
        rows = engine.stores.transcript.rows(session_id, info.hidden if info else ())
        kept |= {row.content for row in rows if row.role == "user"}
    assert set(sent) <= kept
    parent = engine.stores.catalogue.get_session(first)
    assert parent is not None and parent.end_reason == "compressed"
    # The memory flush ran for the compressed sessions (the usual flush turn, over the parent).
    assert all(engine.stores.catalogue.memory_flushed(session_id) for session_id in chain[:-1])
    # Every answer was delivered, one per message.
    assert len(engine.texts()) == 41


def _chatted(env: dict[str, str], first: str = "FACT: my cat is called Miso", count: int = 9) -> tuple[Engine, str]:
    """An engine whose session had `count` messages (the first `first`, the others long) against
    a SmallModel of the window `env` sets; and the session's first id."""
    window = int(env.get("GATEWAY_CONTEXT_WINDOW", "2000"))
    engine = Engine({"GATEWAY_CONTEXT_WINDOW": str(window), **env}, model=SmallModel(window=window))
    engine.send(first, "e0")
    engine.pump()
    first_id = engine.route().session_id
    for i in range(1, count):
        engine.send(f"message {i}\n{FILLER}", f"e{i}")
        engine.pump()
    return engine, first_id


def test_after_a_compression_undo_and_search_still_work() -> None:
    engine, first = _chatted({})
    child = engine.route().session_id
    assert child != first
    child_rows = engine.transcript()
    assert child_rows[0][0] == "system" and "Miso" in child_rows[0][1]
    assert child_rows[-1] == ("assistant", "noted message 8")

    engine.send("/undo", "e-undo")
    engine.pump()
    assert engine.transcript()[-1][1].startswith("noted message 7")

    hits = engine.stores.catalogue.search(key_namespace(None), "called Miso")
    assert first in {hit.session_id for hit in hits}


def test_the_summary_reaches_the_model_as_the_start_of_the_history() -> None:
    engine, _ = _chatted({})
    _, messages, _ = engine.model.requests[-1]
    assert messages[0].content.startswith(SUMMARY_HEAD) and "Miso" in messages[0].content


def test_no_compression_and_no_extra_model_call_below_the_threshold() -> None:
    engine, first = _chatted({"GATEWAY_CONTEXT_WINDOW": "100000"}, first=f"message 0\n{FILLER}", count=6)
    assert engine.route().session_id == first
    assert len(engine.model.requests) == 6


def test_compression_can_be_turned_off() -> None:
    engine, first = _chatted({"GATEWAY_COMPRESSION_ENABLED": "false"}, first="message 0")
    model = engine.model
    assert isinstance(model, SmallModel)
    assert engine.route().session_id == first and model.summaries == 0
    assert max(model.sizes) <= 1_500  # the history is still chosen to fit


def test_a_turn_compresses_only_while_it_holds_the_lease() -> None:
    engine = Engine()
    engine.send("hello", "e0")
    engine.pump()
    session_id = engine.route().session_id
    with pytest.raises(Conflict):
        engine.stores.edits.compress(session_id, "a summary", fence=None, now=engine.clock, lease_token="not-held")
    assert engine.route().session_id == session_id


def test_a_respond_task_run_again_after_its_compression_goes_on_in_the_child() -> None:
    engine = Engine({"GATEWAY_CONTEXT_WINDOW": "2000"}, model=SmallModel(window=2_000))
    for i in range(6):
        engine.send(f"message {i}\n{FILLER}", f"e{i}")
        engine.pump()
    first = engine.route().session_id
    engine.send(f"message 6\n{FILLER}", "e6")
    name = next(n for n in engine.starter.started if n not in engine.ran)
    payload = {"turn": engine.starter.started[name]["turn"], "next": "model"}
    once = engine.step("respond", payload)
    summaries = engine.model.summaries if isinstance(engine.model, SmallModel) else 0
    again = engine.step("respond", payload)  # the same input again: an Express retry
    assert engine.route().session_id != first
    assert again["turn"]["session_id"] == once["turn"]["session_id"] == engine.route().session_id
    assert again["turn"]["reply_seq"] == once["turn"]["reply_seq"]
    assert again["turn"]["user_seqs"] == once["turn"]["user_seqs"]
    assert isinstance(engine.model, SmallModel) and engine.model.summaries == summaries


def _calls_of_one_turn(env: dict[str, str], messages: int) -> tuple[list[str], int]:
    """The DynamoDB calls of the last of `messages` turns, and the model requests it made."""
    engine = Engine(env, model=SmallModel(window=int(env["GATEWAY_CONTEXT_WINDOW"])))
    client = session_tables_client()
    engine.stores = memory_stores(rules_from_settings(engine.settings), client=client)
    for i in range(messages - 1):
        engine.send(f"message {i}\n{FILLER}", f"e{i}")
        engine.pump()
    before, asked = len(client.calls), len(engine.model.requests)
    engine.send(f"message {messages}\n{FILLER}", "last")
    engine.execute(next(name for name in engine.starter.started if name not in engine.ran))
    return client.calls[before:], len(engine.model.requests) - asked


def test_no_extra_store_call_below_the_threshold_and_what_a_compression_costs() -> None:
    small = {"GATEWAY_CONTEXT_WINDOW": "2000"}
    plain, asked = _calls_of_one_turn({**small, "GATEWAY_COMPRESSION_ENABLED": "false"}, 7)
    checked, asked_checked = _calls_of_one_turn({**small, "GATEWAY_COMPRESSION_THRESHOLD": "0.9"}, 3)
    baseline, _ = _calls_of_one_turn({**small, "GATEWAY_COMPRESSION_ENABLED": "false"}, 3)
    assert checked == baseline and asked_checked == 1  # the check costs nothing
    compressed, asked_compressed = _calls_of_one_turn(small, 7)
    assert asked == 1 and asked_compressed == 2  # one summary, one answer
    extra = {op: compressed.count(op) - plain.count(op) for op in ("GetItem", "Query", "BatchWriteItem")}
    assert extra == {"GetItem": 5, "Query": 2, "BatchWriteItem": 1}  # docs/cost.md says so
    assert (compressed.count("TransactWriteItems"), plain.count("TransactWriteItems")) == (1, 0)


def test_compress_on_demand_summarizes_below_the_threshold_and_says_so() -> None:
    engine, first = _chatted({"GATEWAY_CONTEXT_WINDOW": "8000"}, count=5)
    assert engine.route().session_id == first
    engine.send("/compress", "e-compress")
    engine.pump()
    assert engine.replies.bodies[-1]["text"] == "Compressing this session..."
    assert engine.texts()[-1] == COMPRESSED_REPLY
    assert engine.route().session_id != first
    rows = engine.transcript()
    assert rows[0][0] == "system" and "Miso" in rows[0][1]
    engine.send("what do you know about me?", "e-ask")
    engine.pump()
    assert "FACT: my cat is called Miso" in engine.texts()[-1]


def test_compress_on_demand_without_a_session_starts_no_turn() -> None:
    engine = Engine()
    engine.send("/compress", "e-compress")
    assert engine.pump() == []
    assert engine.replies.bodies[-1]["text"] == "Nothing to compress yet."


def test_compress_on_demand_in_a_new_session_has_nothing_to_summarize() -> None:
    engine, _ = _chatted({}, first="hello", count=1)
    engine.send("/new", "e-new")
    fresh = engine.route().session_id
    engine.send("/compress", "e-compress")
    engine.pump()
    assert engine.texts()[-1] == NOTHING_REPLY
    assert engine.route().session_id == fresh


class DoublingModel(SmallModel):
    """Reports twice the prompt tokens the gateway estimates (a tokenizer that counts more)."""

    def complete(self, system: str, messages: list[ChatMessage], tools: list[ToolSpec] | None = None) -> ModelReply:
        reply = super().complete(system, messages, tools)
        return ModelReply(reply.text, reply.model, 2 * request_tokens(system, messages, tools), 5)


def test_the_estimate_is_calibrated_by_the_sessions_last_reported_prompt() -> None:
    env = {"GATEWAY_CONTEXT_WINDOW": "4000", "GATEWAY_COMPRESSION_ENABLED": "false"}
    engine = Engine(env, model=DoublingModel(window=4_000))
    engine.send("hello", "e0")
    engine.pump()
    assert engine.route().tally.prompt_ratio == 2.0  # kept on the route for the next turn
    for i in range(1, 12):
        engine.send(f"message {i}\n{FILLER}", f"e{i}")
        engine.pump()
    model = engine.model
    assert isinstance(model, DoublingModel)
    # Every request after the first was chosen as if its tokens counted double: half the room.
    assert max(model.sizes[1:]) <= (4_000 - 1_000) / 2
    assert max(model.sizes[1:]) > (4_000 - 1_000) / 2 - 200  # and the room was used
