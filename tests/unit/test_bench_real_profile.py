"""bench/real_profile.py: the realistic profile's messages and the fake model's side of them (a
fifth of the turns call a tool first, a tenth are photos, answers 150 to 600 tokens with a median
of 300), and what streaming adds when the two runs are compared."""

from __future__ import annotations

import statistics
from typing import Any

import pytest

from bench.real_profile import Model, answer_text, compare, make_plan, update_of
from tests.fakes.openai_server import text_tokens


def test_the_plan_has_the_profiles_shares_and_answer_lengths() -> None:
    plan = make_plan(60, 10, seed=38)
    assert len(plan) == 60 and len({m.number for m in plan}) == 60
    assert sum(1 for m in plan if m.tool) == 12 and sum(1 for m in plan if m.photo) == 6
    assert sum(1 for m in plan if m.retried) == 6
    assert {m.tool for m in plan if m.tool} == {"memory", "session_search"}
    lengths = [m.tokens for m in plan]
    assert min(lengths) >= 150 and max(lengths) <= 600
    assert statistics.median(lengths) == pytest.approx(300, rel=0.03)
    assert make_plan(60, 10, seed=38) == plan  # the same messages and answers every run


def test_an_answer_has_its_tokens_and_names_the_message_it_answers_last() -> None:
    message = make_plan(10, 2, seed=1)[3]
    text = answer_text(message)
    assert len(text_tokens(text)) == message.tokens
    assert text.endswith(f"(answer:{message.number})")


def test_a_photo_message_carries_its_text_as_the_caption() -> None:
    plan = make_plan(20, 4, seed=2)
    photo = next(m for m in plan if m.photo)
    body = update_of(photo)["message"]
    assert "text" not in body and body["caption"].startswith(f"message {photo.number}:")
    assert body["photo"][-1]["file_id"] == "photo"


def _request(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "gpt-4o-mini", "messages": [{"role": "system", "content": "be brief"}, *messages]}


def test_the_model_calls_its_tool_first_then_answers_after_the_result() -> None:
    plan = make_plan(20, 4, seed=3)
    message = next(m for m in plan if m.tool)
    model = Model(plan)
    asked = {"role": "user", "content": f"message {message.number}: is the queue green?"}
    first = model.answer(_request({"role": "user", "content": "message 1: old"}, asked))
    assert first is not None and first["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == message.tool
    call = first["choices"][0]["message"]
    second = model.answer(_request(asked, call, {"role": "tool", "tool_call_id": "c", "content": "ok"}))
    assert second is not None and second["choices"][0]["message"]["content"] == answer_text(message)
    assert model.requests == {"tool call": 1, "answer": 1} and message.number in model.asked


def test_the_model_reads_the_message_from_an_images_text_part_and_leaves_others_to_the_default() -> None:
    plan = make_plan(10, 2, seed=4)
    message = next(m for m in plan if not m.tool)
    parts = [{"type": "text", "text": f"message {message.number}: what is this?"},
             {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AA=="}}]  # fmt: skip
    found = Model(plan).answer(_request({"role": "user", "content": parts}))
    assert found is not None and found["usage"]["completion_tokens"] == message.tokens
    assert Model(plan).answer(_request({"role": "user", "content": "warm up"})) is None


def test_streaming_extra_is_the_difference_of_the_two_runs_per_streamed_answer() -> None:
    def run(total: float, reads: float, slept: float, edited: float) -> dict[str, Any]:
        return {"cost_per_million_usd": total, "cost_by_service": {"dynamodb": reads / 4, "lambda": total - reads / 4},
                "per_message": {"dynamodb_read_units": reads, "dynamodb_write_units": 2.0},
                "lambda_slept_seconds_per_message": slept, "answers_shown_whole_by_an_edit": edited}  # fmt: skip

    found = compare(run(50.0, 3.0, 0.5, 0.5), run(48.0, 1.0, 0.0, 0.0))
    assert found["streaming_extra_usd_per_million"] == 4.0  # 2 USD over the run, half the answers streamed
    assert found["streaming_extra_dynamodb_units_per_message"] == {"read": 2.0, "write": 0.0}
    assert found["streaming_extra_lambda_slept_seconds_per_message"] == 0.5
    with pytest.raises(RuntimeError):
        compare(run(50.0, 3.0, 0.5, 0.0), run(48.0, 1.0, 0.0, 0.0))
