"""The PrepareMedia task (services/turn/attachments.py): a turn whose message carries files starts
with it, on the attachments function; the Respond task, on the agent function sized for waiting
on the model, then reads each file's record and fetches nothing."""

from __future__ import annotations

from typing import Any

from hermes_gateway.domain.source import InboundMessage
from hermes_gateway.domain.turn_state import Step
from hermes_gateway.platforms.media import Fetched
from hermes_gateway.services.router import Access, route_message
from tests.fakes.access import FakePairingStore
from tests.fakes.engine import ALICE, Engine
from tests.fakes.media_store import MemoryMedia

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


def with_photo(engine: Engine, event: str, text: str = "what is this?") -> None:
    access = Access(FakePairingStore(), engine.replies, engine.router_events)
    photo = {"kind": "image", "mime": "image/png", "name": "chart.png", "size": len(PNG), "ref": {"file_id": "p1"}}
    message = InboundMessage(source=ALICE, text=text, event_id=event, received_at=engine.clock, attachments=(photo,))
    route_message(message, settings=engine.settings, stores=engine.stores, starter=engine.starter, access=access,
                  now=engine.clock)  # fmt: skip


def test_a_message_with_a_file_is_fetched_by_the_prepare_media_task_before_the_model_is_asked() -> None:
    engine, bucket, fetched_in = Engine(), MemoryMedia(), list[str]()
    running: list[str] = []
    engine.overrides.update(
        media=bucket,
        fetch_media=lambda attachment, platform, profile, limit: (
            fetched_in.append(running[-1]) or Fetched(PNG, "image/png")
        ),
    )
    step = engine.step

    def noted(name: str, state: dict[str, Any], retry: int = 0) -> dict[str, Any]:
        running.append(name)
        return step(name, state, retry)

    engine.step = noted  # type: ignore[method-assign]
    # Given a message with a photo
    with_photo(engine, "e0")
    started = engine.starter.started[engine.first()]
    assert started["next"] == Step.MEDIA

    # When its execution runs
    workflow = engine.workflow
    ending, _ = workflow.run(started)

    # Then the file was fetched once, by the PrepareMedia task, and the model saw the image
    assert ending == "succeeded" and workflow.visited[:3] == ["Begin", "PrepareMedia", "Respond"]
    assert fetched_in == ["media"] and running[:2] == ["media", "respond"]
    assert [k for k in bucket.objects if not k.endswith(".json")] and any(k.endswith(".json") for k in bucket.objects)
    assert engine.texts() and engine.model.requests[-1][1][-1].images


def test_a_message_without_files_goes_straight_to_the_model() -> None:
    engine = Engine()
    engine.send("hello", "e0")
    started = engine.starter.started[engine.first()]
    assert started.get("next", Step.MODEL) == Step.MODEL
    workflow = engine.workflow
    workflow.run(started)
    assert "PrepareMedia" not in workflow.visited and "Respond" in workflow.visited
