"""Cost of the delivery receipts WhatsApp posts back for every message the gateway sends.

WhatsApp's Cloud API reports each sent message's progress to the same webhook as the messages
(the `messages` field, which cannot be taken without them): a `statuses` notification when the
message is sent, when it is delivered and, if the user has read receipts on, when it is read. Each
is an API Gateway request and an ingress invocation, answered 200 and otherwise ignored; only a
`failed` one touches a table (its outbox row is marked, BEHAVIOUR §6). That is a price of a
WhatsApp reply that the text message's bench (Telegram, which reports nothing back) never sees.

Local mode in-process with WhatsApp enabled, the meter of bench/message_cost.py installed: a few
signed status notifications one at a time (the Lambda profile: CPU time alone), then
`--receipts` of them from 10 clients at once, sent, delivered and read in turn for each message,
with the logs counted at INFO. Priced by bench/pricing.py per million receipts, then per million
WhatsApp replies at 2 receipts (sent, delivered) and at 3 (read as well).

Usage: .venv/bin/python bench/receipts_cost.py [--receipts N] [--solo N] [--quick]
Writes bench/results/receipts-cost-latest.json.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import secrets
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "layers" / "common", ROOT / "local"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from bench.message_cost import RESULTS, local_gateway, table_specs  # noqa: E402
from bench.meter import Meter, counted_logs  # noqa: E402
from bench.pricing import price, profile  # noqa: E402

STATUSES = ("sent", "delivered", "read")  # in the order WhatsApp reports them
PHONE_NUMBER_ID = "100000000000001"
RECIPIENT = "15550001111"
CONCURRENCY = 10
# Made per run, never a fixed value on disk
APP_SECRET = secrets.token_hex(16)


def environment() -> dict[str, str]:
    """Local mode with WhatsApp on (its sends are not made here: no reply is asked for)."""
    return {
        "WHATSAPP_ENABLED": "true",
        "WHATSAPP_APP_SECRET": APP_SECRET,
        "WHATSAPP_VERIFY_TOKEN": secrets.token_hex(8),
        "WHATSAPP_ACCESS_TOKEN": secrets.token_hex(16),
        "WHATSAPP_PHONE_NUMBER_ID": PHONE_NUMBER_ID,
    }


def status_notification(n: int, status: str) -> bytes:
    """One `statuses` notification as Meta posts it for the gateway's n-th sent message; the
    message carries its outbox row in `biz_opaque_callback_data`, as the gateway's sends do."""
    value = {
        "messaging_product": "whatsapp",
        "metadata": {"display_phone_number": "15550009999", "phone_number_id": PHONE_NUMBER_ID},
        "statuses": [
            {
                "id": f"wamid.bench{n:08d}",
                "status": status,
                "timestamp": str(int(time.time())),
                "recipient_id": RECIPIENT,
                "biz_opaque_callback_data": f"turn-bench-{n}#1",
                "conversation": {"id": f"conv{n % 7}", "origin": {"type": "service"}},
                "pricing": {"billable": True, "pricing_model": "PMP", "category": "service"},
            }
        ],
    }
    payload = {
        "object": "whatsapp_business_account",
        "entry": [{"id": "W1", "changes": [{"field": "messages", "value": value}]}],
    }
    return json.dumps(payload, separators=(",", ":")).encode()


def signed_headers(body: bytes) -> dict[str, str]:
    """The headers Meta sends with a notification: its HMAC-SHA256 under the app secret."""
    signature = "sha256=" + hmac.new(APP_SECRET.encode(), body, hashlib.sha256).hexdigest()
    return {"content-type": "application/json", "x-hub-signature-256": signature}


def post(base_url: str, body: bytes) -> int:
    request = urllib.request.Request(
        base_url + "/webhooks/whatsapp", data=body, headers=signed_headers(body), method="POST"
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()
        return int(response.status)


def run(receipts: int, solo: int) -> dict[str, Any]:
    meter = Meter()
    meter.install()
    try:
        with local_gateway(environment()) as (gateway, _):
            meter.table_specs = table_specs()
            alone = []
            for n in range(solo):
                meter.wait_idle()
                meter.reset()
                if post(gateway.url, status_notification(n, STATUSES[n % len(STATUSES)])) != 200:
                    raise RuntimeError("the webhook refused a status notification")
                meter.wait_idle()
                alone.extend(meter.invocations)
            bodies = [
                status_notification(solo + n // len(STATUSES), STATUSES[n % len(STATUSES)]) for n in range(receipts)
            ]
            meter.wait_idle()
            meter.reset()
            started = time.perf_counter()
            with counted_logs() as logs:
                with ThreadPoolExecutor(max_workers=CONCURRENCY, thread_name_prefix="meta") as pool:
                    answers = list(pool.map(lambda body: post(gateway.url, body), bodies))
                meter.wait_idle()
            seconds = time.perf_counter() - started
    finally:
        meter.uninstall()
    if any(status != 200 for status in answers):
        raise RuntimeError(f"status notifications refused: {sorted(set(answers))}")
    priced = price(meter, receipts, receipts, logs.bytes, len(logs.metrics), profile(alone))
    return summarize(priced, meter, receipts, seconds)


def summarize(priced: dict[str, Any], meter: Meter, receipts: int, seconds: float) -> dict[str, Any]:
    """The report: per million receipts, and per million WhatsApp replies at 2 and 3 receipts."""
    per_receipt = priced["cost_per_million_usd"]
    return {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "receipts": receipts,
        "seconds": round(seconds, 1),
        "usd_per_million_receipts": per_receipt,
        "cost_by_service": priced["cost_by_service"],
        "usd_per_million_whatsapp_replies": {
            "sent_and_delivered": round(2 * per_receipt, 2),
            "sent_delivered_and_read": round(3 * per_receipt, 2),
        },
        "aws_requests_per_receipt": round(sum(meter.calls.values()) / receipts, 3),
        "per_receipt": priced["per_message"],
        "lambda_by_function": priced["lambda_by_function"],
        "failed_invocations": meter.failed_invocations,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--receipts", type=int, default=300)
    parser.add_argument("--solo", type=int, default=20, help="receipts sent one at a time first (the Lambda profile)")
    parser.add_argument("--quick", action="store_true", help="30 receipts, 6 alone (a smoke run)")
    args = parser.parse_args()
    receipts, solo = (30, 6) if args.quick else (args.receipts, args.solo)
    report = run(receipts, solo)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "receipts-cost-latest.json"
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(
        json.dumps(
            {
                k: report[k]
                for k in ("usd_per_million_receipts", "usd_per_million_whatsapp_replies", "aws_requests_per_receipt")
            },
            indent=2,
        )
    )
    print(f"written to {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
