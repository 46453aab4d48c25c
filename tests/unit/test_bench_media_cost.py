"""bench/media_cost.py and the S3 prices it adds to bench/pricing.py: requests by tier, storage for
the retention, the summary against the text message, the item and state limits."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from bench.media_cost import ITEM_LIMIT_BYTES, STATE_LIMIT_BYTES, kind_update, limits_ok, summarize
from bench.message_cost import Session
from bench.meter import Meter
from bench.pricing import PRICES, s3_requests, s3_requests_usd, s3_storage_usd_per_million


def test_s3_requests_are_priced_by_tier_and_deletes_are_free() -> None:
    operations = [("PutObject", 2), ("GetObject", 3), ("HeadObject", 1), ("DeleteObject", 4), ("ListObjectsV2", 1)]
    assert s3_requests(operations) == {"put": 3, "get": 4, "free": 4}
    per = PRICES["per_request"]
    assert s3_requests_usd(operations) == pytest.approx(3 * per["s3_put_request"] + 4 * per["s3_get_request"])
    # as recorded: 0.005 USD per 1,000 PUTs, 0.0004 per 1,000 GETs
    assert s3_requests_usd([("PutObject", 1_000_000)]) == pytest.approx(5.0)
    assert s3_requests_usd([("GetObject", 1_000_000)]) == pytest.approx(0.4)
    assert s3_requests_usd([]) == 0.0


def test_storage_is_the_bytes_kept_for_the_retention_at_the_gb_month_price() -> None:
    gb = 1024**3
    month = PRICES["monthly"]["s3_standard_gb_month"]
    # a million messages leaving a GB between them, kept 30 days: one GB-month
    assert s3_storage_usd_per_million(gb / 1e6, 30) == pytest.approx(month)
    assert s3_storage_usd_per_million(gb / 1e6, 15) == pytest.approx(month / 2)
    assert s3_storage_usd_per_million(0, 30) == 0.0


def test_a_run_with_s3_calls_prices_them_in_the_total() -> None:
    from bench.pricing import price

    meter = Meter()
    meter.calls = Counter({("agent", "s3", "PutObject", "media"): 2, ("agent", "s3", "GetObject", "media"): 2})
    report = price(meter, messages=1, webhook_requests=1, log_bytes=0)
    assert report["cost_by_service"]["s3"] == pytest.approx(2 * 5.0 + 2 * 0.4)
    assert report["per_message"]["s3_requests"] == {"put": 2, "get": 2, "free": 0}
    assert "s3.PutObject" not in report["unpriced_requests_per_message"]


def kind(usd: float, by: dict[str, float], requests: float, item: int = 700, state: int = 6000,
         storage: float = 0.0) -> dict[str, Any]:  # fmt: skip
    return {
        "cost_per_million_usd": usd, "cost_by_service": by, "aws_requests_per_message_total": requests,
        "s3_storage": {"usd_per_million_messages": storage}, "largest_dynamodb_item_bytes": item,
        "largest_workflow_state_bytes": state, "limits_ok": limits_ok(item, state),
    }  # fmt: skip


def test_the_summary_is_each_kind_against_the_text_message() -> None:
    kinds = {
        "text": kind(10.0, {"lambda": 3.0, "dynamodb": 7.0}, 12.0),
        "photo": kind(25.5, {"lambda": 5.5, "dynamodb": 7.0, "s3": 13.0}, 16.5, item=760, storage=2.5),
    }
    summary = summarize(kinds)
    assert summary["text"]["delta_vs_text_usd_per_million"] == 0.0
    photo = summary["photo"]
    assert photo["usd_per_million"] == 25.5
    assert photo["delta_vs_text_usd_per_million"] == 15.5
    assert photo["delta_by_service"] == {"lambda": 2.5, "s3": 13.0}  # dynamodb did not change
    assert photo["delta_aws_requests_per_message"] == 4.5
    assert photo["usd_per_million_with_storage"] == 28.0 and photo["s3_storage_usd_per_million"] == 2.5
    assert photo["largest_dynamodb_item_bytes"] == 760 and photo["limits_ok"] is True


def test_the_limits_are_4_kb_per_item_and_32_kb_per_state() -> None:
    assert limits_ok(ITEM_LIMIT_BYTES, STATE_LIMIT_BYTES)
    assert not limits_ok(ITEM_LIMIT_BYTES + 1, 100)
    assert not limits_ok(100, STATE_LIMIT_BYTES + 1)


def test_each_kind_is_a_telegram_update_with_its_attachment() -> None:
    dm = Session("dm", 7, 7)
    assert "photo" in kind_update("photo", 1, dm)["message"] and "text" not in kind_update("photo", 1, dm)["message"]
    assert kind_update("voice", 2, dm)["message"]["voice"]["mime_type"] == "audio/ogg"
    assert kind_update("document", 3, dm)["message"]["document"]["mime_type"] == "application/pdf"
    assert "send me the chart" in kind_update("outbound_photo", 4, dm)["message"]["text"]
    with pytest.raises(ValueError):
        kind_update("sticker", 5, dm)


def test_run_all_merges_the_kinds_beside_text() -> None:
    from bench.run_all import media_cost_keys

    summary = summarize({
        "text": kind(10.0, {"lambda": 3.0}, 12.0),
        "voice": kind(28.0, {"lambda": 7.0, "s3": 11.0}, 20.0, storage=0.6),
    })  # fmt: skip
    speech = {"usd_per_million_characters": 15.0, "voice": {"speech_usd_per_million_messages": 22_500.0}}
    keys = media_cost_keys({"summary": summary, "limits_ok": True, "speech": speech})
    assert keys == {
        "media_cost_per_million_usd": {"voice": 28.0},
        "media_cost_delta_vs_text_usd_per_million": {"voice": 18.0},
        "media_s3_storage_usd_per_million": {"voice": 0.6},
        "media_limits_ok": True,
        "media_speech_usd_per_million": {"voice": 22_500.0},
    }


def test_a_spoken_answers_price_at_the_speech_api_is_kept_apart() -> None:
    from bench.media_cost import speech_cost

    found = speech_cost({"text": [], "voice_reply": [1500, 1000]})
    assert found == {
        "usd_per_million_characters": 15.0,
        "voice_reply": {
            "answers_spoken": 2, "characters_per_answer": 1250, "speech_usd_per_million_messages": 18750.0,
            # the same characters at Amazon Polly, by engine
            "polly_usd_per_million_messages": {
                "standard": 5000.0, "neural": 20000.0, "generative": 37500.0, "long-form": 125000.0,
            },
        },
    }  # fmt: skip
