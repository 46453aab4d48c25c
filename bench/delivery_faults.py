"""Delivery under injected platform faults, end to end through the delivery handler on moto.

N reply jobs (some long enough to split) are put on the delivery queue; a fake Telegram on loopback
answers each request with a fault drawn at random (429, 500, a permanent 400, 403 "blocked", a 200
without a message id) or a success; a loop plays Lambda's SQS event source (retries come back at
once instead of after their backoff, so the run is fast; the receive count and redrive policy are
the queue's own). The queue is FIFO, one group per chat, as deployed: 50 chats get their replies in
the order queued. At the end every job must be accounted for: sent, gone, unknown or dead-lettered,
no chunk may reach the platform twice, and no chat may get a reply before an earlier one.

Usage: .venv/bin/python bench/delivery_faults.py [--jobs N] [--seed S]
Writes bench/results/delivery-faults-latest.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "layers" / "common", ROOT / "local"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

FAULTS = (  # (name, probability) per send request; the rest succeed
    ("rate_limited", 0.10),
    ("server_error", 0.10),
    ("refused", 0.02),
    ("blocked", 0.02),
    ("no_message_id", 0.01),
)


def _faulty_telegram(rng: random.Random) -> Any:
    """A fake Bot API that answers each request with a fault drawn from FAULTS, or a success."""
    from tests.fakes.loopback import ScriptedAnswer
    from tests.fakes.telegram_server import FakeTelegram, too_many_requests

    answers = {
        "rate_limited": ScriptedAnswer(429, too_many_requests(0)),
        "server_error": ScriptedAnswer(502, {"ok": False, "error_code": 502, "description": "Bad Gateway"}),
        "refused": ScriptedAnswer(400, {"ok": False, "error_code": 400, "description": "Bad Request: nope"}),
        "blocked": ScriptedAnswer(403, {"ok": False, "error_code": 403, "description": "Forbidden: bot was blocked"}),
        "no_message_id": ScriptedAnswer(200, {"ok": True, "result": {}}),
    }

    class FaultyTelegram(FakeTelegram):
        injected: Counter[str] = Counter()

        def _default_answer(self, request: Any) -> ScriptedAnswer:
            roll, edge = rng.random(), 0.0
            for name, probability in FAULTS:
                edge += probability
                if roll < edge:
                    self.injected[name] += 1
                    return answers[name]
            return super()._default_answer(request)

    return FaultyTelegram()


def _drain(queue_url: str, deadline: float) -> tuple[int, int]:
    """Play Lambda's SQS event source until the queue is empty; (retried records, invocations)."""
    import boto3

    from hermes_gateway.resources import function
    from hermes_local import pollers
    from hermes_local.runtime import LambdaContext, load_handler_module

    sqs = boto3.client("sqs")
    handler = load_handler_module(function("delivery")).lambda_handler
    arn = "arn:aws:lambda:us-east-1:1:function:delivery"
    retried = invocations = 0
    while time.time() < deadline:
        batch = sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=5, AttributeNames=["All"], VisibilityTimeout=30
        ).get("Messages", [])
        if not batch:
            counts = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])["Attributes"]
            if not int(counts["ApproximateNumberOfMessages"]) + int(counts["ApproximateNumberOfMessagesNotVisible"]):
                break
            time.sleep(0.05)  # a chat's jobs are in flight: its group is held until they come back
            continue
        event = pollers.sqs_event(batch, "arn:aws:sqs:us-east-1:1:delivery", "us-east-1")
        result = handler(event, LambdaContext("delivery", 256, arn, deadline=time.time() + 30))
        invocations += 1
        failed = {f["itemIdentifier"] for f in result["batchItemFailures"]}
        retried += len(failed)
        for message in batch:
            if message["MessageId"] not in failed:
                sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
    return retried, invocations


def run(jobs: int = 200, seed: int = 7) -> dict[str, Any]:
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")  # before the logger is first imported
    import boto3
    from moto import mock_aws

    from hermes_gateway import wiring
    from hermes_gateway.adapters import aws as aws_adapters
    from hermes_gateway.resources import DELIVERY_QUEUE
    from hermes_local.aws import configure_moto, create_resources, honour_fifo_groups

    rng = random.Random(seed)
    saved = dict(os.environ)
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1",
        AWS_REGION="us-east-1", POWERTOOLS_METRICS_DISABLED="true",
    )  # fmt: skip
    for name in ("AWS_ENDPOINT_URL", "HERMES_SECRETS_PREFIX", "HERMES_LOCAL_MODE"):
        os.environ.pop(name, None)
    # Retries come back at once: the schedule is tested elsewhere; here only the outcome counts.
    original_delay = aws_adapters.SqsQueue.delay_retry
    aws_adapters.SqsQueue.delay_retry = lambda self, receipt_handle, seconds: original_delay(self, receipt_handle, 0)  # type: ignore[method-assign]
    configure_moto()
    honour_fifo_groups()
    started = time.perf_counter()
    try:
        with mock_aws(), _faulty_telegram(rng) as fake:
            _, env = create_resources("us-east-1", prefix="bench")
            os.environ.update(env, TELEGRAM_BOT_TOKEN=fake.token, TELEGRAM_API_BASE_URL=fake.base_url)
            wiring.reset()
            sqs = boto3.client("sqs")
            queue_url, dlq_url = env[DELIVERY_QUEUE.env_var], env[DELIVERY_QUEUE.dead_letter_env_var]
            queue = aws_adapters.SqsQueue(queue_url)
            job_ids = []
            for n in range(jobs):
                # Every word names its job, so a chunk sent twice shows as a repeated text.
                text = " ".join(f"j{n}w{i}" for i in range(rng.choice((3, 3, 3, 900))))
                target = {"platform": "telegram", "chat_id": str(1000 + n % 50)}
                queue.send({"delivery_id": f"job-{n}", "target": target, "text": text})
                job_ids.append(f"job-{n}")
            retried, invocations = _drain(queue_url, time.time() + 300)
            dead = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["ApproximateNumberOfMessages"])
            report = _report(wiring.outbox().recent(limit=1_000_000), fake, job_ids)
            report.update(
                jobs=jobs, seed=seed, retried=retried, handler_invocations=invocations,
                dead_lettered=int(dead["Attributes"]["ApproximateNumberOfMessages"]),
                seconds=round(time.perf_counter() - started, 2),
            )  # fmt: skip
    finally:
        aws_adapters.SqsQueue.delay_retry = original_delay  # type: ignore[method-assign]
        os.environ.clear()
        os.environ.update(saved)
        wiring.reset()
    return report


def _report(rows: list[Any], fake: Any, job_ids: list[str]) -> dict[str, Any]:
    by_job: dict[str, set[str]] = {}
    for row in rows:
        by_job.setdefault(row.delivery_id.split("#")[0], set()).add(row.status)
    outcome = Counter(_job_outcome(by_job.get(job_id, set())) for job_id in job_ids)
    delivered_texts = Counter(m["text"] for m in fake.sent)
    return {
        "chunks_recorded": len(rows),
        "send_requests": len(fake.calls("sendMessage")),
        "chunks_sent": sum(1 for r in rows if r.status == "sent"),
        "jobs_sent": outcome["sent"],
        "jobs_dead_lettered": outcome["failed"],
        "gone": outcome["gone"],
        "unknown": outcome["unknown"],
        "duplicated": sum(count - 1 for count in delivered_texts.values() if count > 1),
        "lost": outcome["lost"],
        "order_violations": _order_violations(fake.sent),
        "faults_injected": dict(fake.injected),
    }


def _order_violations(sent: list[dict[str, Any]]) -> int:
    """Messages a chat got after a message of a later job (job n is queued before job n + 50)."""
    highest: dict[str, int] = {}
    violations = 0
    for message in sent:
        job = int(message["text"].split("w", 1)[0].removeprefix("j").split(" ")[0])
        chat = str(message["chat_id"])
        if job < highest.get(chat, -1):
            violations += 1
        highest[chat] = max(highest.get(chat, -1), job)
    return violations


def _job_outcome(statuses: set[str]) -> str:
    """What became of a job, from its chunks' statuses."""
    if not statuses:
        return "lost"
    for final in ("gone", "unknown", "failed"):
        if final in statuses:
            return final
    return "sent" if statuses == {"sent"} else "lost"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    report = run(args.jobs, args.seed)
    out = ROOT / "bench" / "results" / "delivery-faults-latest.json"
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
