"""Outbound media through the DynamoDB outbox and the S3 media bucket (moto): a file's row is
claimed once and sent once; a retry after the platform's 5xx reads the stored copy and fetches
nothing again from where the reference points."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hermes_gateway.adapters.dynamo_outbox import DynamoOutbox
from hermes_gateway.adapters.s3_media import S3MediaStore
from hermes_gateway.errors import TransientError
from hermes_gateway.platforms.telegram import TelegramSender
from hermes_gateway.resources import MEDIA
from hermes_gateway.services.delivery import DeliveryDeps, DeliveryJob, deliver
from hermes_gateway.services.outbound_media import Fetching
from tests.fakes.media_server import FakeMediaHost, file
from tests.fakes.telegram_server import SERVER_ERROR, FakeTelegram

pytestmark = pytest.mark.integration

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4


@pytest.fixture
def host() -> Iterator[FakeMediaHost]:
    with FakeMediaHost() as fake:
        fake.files["/cat.png"] = file(PNG, "image/png")
        yield fake


def job(url: str) -> DeliveryJob:
    return DeliveryJob.from_dict(
        {
            "delivery_id": "turn-9",
            "turn_id": "turn-9",
            "session": "abc123",
            "target": {"platform": "telegram", "chat_id": "99"},
            "text": "here it is",
            "media": [{"reference": url}],
        }
    )


def test_a_file_is_claimed_once_sent_once_and_a_retry_reads_the_stored_copy(aws: Any, host: FakeMediaHost) -> None:
    outbox, store = DynamoOutbox(aws.bindings), S3MediaStore(aws.bindings.buckets[MEDIA.name])
    with FakeTelegram() as telegram:
        telegram.answer_next(502, SERVER_ERROR)
        deps = DeliveryDeps(
            outbox=outbox,
            sender_for=lambda platform, via: TelegramSender(telegram.base_url, telegram.token),
            now=lambda: 1_764_400_000.0,
            profile="default",
            media=Fetching(store, 1_000_000, local=True),
        )
        with pytest.raises(TransientError):
            deliver(job(host.url("/cat.png")), deps)
        assert outbox.get("turn-9#m1").status == "failed"  # type: ignore[union-attr]

        sent = deliver(job(host.url("/cat.png")), deps)
        repeated = deliver(job(host.url("/cat.png")), deps)

        uploads = telegram.uploads("sendPhoto")
    assert (sent.sent_chunks, repeated.sent_chunks) == (1, 0)
    assert len(uploads) == 2 and uploads[-1][1]["photo"].value == PNG
    assert uploads[-1][1]["caption"].text == "here it is" and telegram.sent == []
    assert host.paths() == ["/cat.png"]  # fetched once, for every try
    row = outbox.get("turn-9#m1")
    assert row is not None and row.status == "sent" and row.platform_message_id
    assert row.media == [
        {"key": "default/abc123/out/turn-9-1", "name": "cat.png", "kind": "image", "mime": "image/png"}
    ]
    assert store.get("default/abc123/out/turn-9-1") == (PNG, "image/png")
