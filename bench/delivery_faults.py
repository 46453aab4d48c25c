"""Delivery under injected platform faults, end to end through the delivery function on moto.

N reply jobs (some long enough to split) for 50 chats are handed to the delivery function as the
transport does: each chat's jobs one after the other through the waiting path a turn uses
(`WaitingDeliveries`: invoked, waited for, retried, or handed to the asynchronous path), and some
jobs a second time as an asynchronous invoke run beside it (Lambda may run an event twice; several
instances of the function at once: the asynchronous invokes have their own worker threads, with
Lambda's two retries, here at once, and its dead-letter queue). A fake Telegram on loopback answers
each request with a fault drawn at random (429, 500, a permanent 400, 403 "blocked", a 200 without
a message id) or a success. At the end every job must be accounted for: sent, gone, unknown or
dead-lettered; no chunk may reach the platform twice, and no chat may get a reply before an
earlier one (a chat's jobs are a session's replies, one turn after another), unless the earlier
one's waited delivery gave up and handed it to the asynchronous retries (docs/architecture.md:
only such an answer may be passed by a later one). `order_violations` counts every reply that came
after a later one; `order_violations_unexplained`, those whose job was not handed over: must be 0.

Usage: .venv/bin/python bench/delivery_faults.py [--jobs N] [--seed S]
Writes bench/results/delivery-faults-latest.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
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
    """A fake Bot API that answers each request with a fault drawn from FAULTS, or a success. A
    refusal is about the message (a 400 for what it says), so a message refused once is refused
    every time it comes again (a duplicate run of its job, a redrive)."""
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
        refused: set[str] = set()

        def _default_answer(self, request: Any) -> ScriptedAnswer:
            text = str((request.json or {}).get("text"))
            if text in self.refused:
                return answers["refused"]
            roll, edge = rng.random(), 0.0
            for name, probability in FAULTS:
                edge += probability
                if roll < edge:
                    self.injected[name] += 1
                    if name == "refused":
                        self.refused.add(text)
                    return answers[name]
            return super()._default_answer(request)

    return FaultyTelegram()


CHATS = 50
DUPLICATE_INVOKE = 0.15  # per job: the event run a second time, asynchronously, beside the first


def _send_all(function_arn: str, jobs: list[dict[str, Any]], rng: random.Random) -> tuple[int, set[str]]:
    """Each chat's jobs in order through the waiting path (one thread per chat), some also run
    again as asynchronous invokes; how many were invoked twice, and the jobs the waiting path
    handed to the asynchronous retries after its own tries failed."""
    from hermes_gateway.adapters.aws import LambdaDeliveries, WaitingDeliveries

    handed_over: set[str] = set()

    class Watched(WaitingDeliveries):
        def _attempt(self, body: dict[str, Any]) -> str | None:
            failure = super()._attempt(body)
            (handed_over.add if failure else handed_over.discard)(str(body["delivery_id"]))
            return failure  # the last try's failure is what sends the job to the asynchronous path

    waiting, again = Watched(function_arn), LambdaDeliveries(function_arn)
    twice = {job["delivery_id"] for job in jobs if rng.random() < DUPLICATE_INVOKE}
    by_chat: dict[str, list[dict[str, Any]]] = {}
    for job in jobs:
        by_chat.setdefault(job["target"]["chat_id"], []).append(job)

    def chat(own: list[dict[str, Any]]) -> None:
        for job in own:
            if job["delivery_id"] in twice:
                again.send(job)
            waiting.send(job)

    threads = [threading.Thread(target=chat, args=(own,), name=f"chat-{c}") for c, own in by_chat.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return len(twice), handed_over


def run(jobs: int = 200, seed: int = 7) -> dict[str, Any]:
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")  # before the logger is first imported
    from moto import mock_aws

    from hermes_gateway import wiring
    from hermes_gateway.resources import function
    from hermes_gateway.services.dead_letters import peek
    from hermes_local.aws import AsyncInvokes, configure_moto, create_resources, install_lambda_dispatch
    from hermes_local.runtime import LambdaContext, load_handler_module

    rng = random.Random(seed)
    saved = dict(os.environ)
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1",
        AWS_REGION="us-east-1", POWERTOOLS_METRICS_DISABLED="true",
    )  # fmt: skip
    for name in ("AWS_ENDPOINT_URL", "HERMES_SECRETS_PREFIX", "HERMES_LOCAL_MODE"):
        os.environ.pop(name, None)
    configure_moto()
    started = time.perf_counter()
    runner: AsyncInvokes | None = None
    try:
        with mock_aws(), _faulty_telegram(rng) as fake:
            _, env = create_resources("us-east-1", prefix="bench")
            os.environ.update(env, TELEGRAM_BOT_TOKEN=fake.token, TELEGRAM_API_BASE_URL=fake.base_url)
            wiring.reset()
            arn = env[function("delivery").env_var]
            delivery = load_handler_module(function("delivery")).lambda_handler
            invocations: Counter[str] = Counter()

            def handler(event: dict[str, Any], context: Any) -> Any:
                kind = "asynchronous" if threading.current_thread().name.startswith("lambda-async") else "waited"
                invocations[kind] += 1
                return delivery(event, context)

            def context(name: str) -> Any:
                return LambdaContext(name, 256, arn, deadline=time.time() + 30)

            name = arn.rsplit(":", 1)[-1]
            # Lambda's retries come after about one and two minutes: scaled down, not at once, so a
            # duplicate run that met the first run's claim finds the chunk settled when it retries.
            runner = AsyncInvokes({name: env["HERMES_DEAD_LETTERS_QUEUE_URL"]}, retry_delays=(0.5, 1.0))
            install_lambda_dispatch(lambda called: handler if called == name else None, context, runner)
            job_list = []
            for n in range(jobs):
                # Every word names its job, so a chunk sent twice shows as a repeated text.
                text = " ".join(f"j{n}w{i}" for i in range(rng.choice((3, 3, 3, 900))))
                target = {"platform": "telegram", "chat_id": str(1000 + n % CHATS)}
                job_list.append({"delivery_id": f"job-{n}", "turn_id": f"job-{n}", "target": target, "text": text})
            twice, handed_over = _send_all(arn, job_list, rng)
            runner.wait_idle(300)
            dead = peek(wiring.dead_letters(), 10_000)
            dead_jobs = {job["delivery_id"] for letter in dead for job in letter.jobs}
            report = _report(
                wiring.outbox().recent(limit=1_000_000), fake, [j["delivery_id"] for j in job_list], handed_over
            )
            failed = set(report.pop("failed_jobs"))
            report.update(
                jobs=jobs, seed=seed, invoked_twice=twice, handler_invocations=dict(invocations),
                dead_lettered=len(dead_jobs),
                # a failed job the outbox shows but no dead letter holds would be lost: must be 0
                failed_not_dead_lettered=len(failed - dead_jobs),
                # a duplicate run that gave up while the first run was sending: a redrive sends nothing
                dead_lettered_but_delivered=len(dead_jobs - failed),
                dead_letter_kinds=dict(Counter(letter.kind for letter in dead)),
                seconds=round(time.perf_counter() - started, 2),
            )  # fmt: skip
    finally:
        if runner is not None:
            runner.close()
        os.environ.clear()
        os.environ.update(saved)
        wiring.reset()
    return report


def _report(rows: list[Any], fake: Any, job_ids: list[str], handed_over: set[str]) -> dict[str, Any]:
    by_job: dict[str, set[str]] = {}
    for row in rows:
        by_job.setdefault(row.delivery_id.split("#")[0], set()).add(row.status)
    outcomes = {job_id: _job_outcome(by_job.get(job_id, set())) for job_id in job_ids}
    outcome = Counter(outcomes.values())
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
        **_order(fake.sent, handed_over),
        "handed_to_asynchronous_retries": len(handed_over),
        "faults_injected": dict(fake.injected),
        "failed_jobs": sorted(job_id for job_id, found in outcomes.items() if found == "failed"),
    }


def _order(sent: list[dict[str, Any]], handed_over: set[str]) -> dict[str, int]:
    """Messages a chat got after a message of a later job (job n is queued before job n + 50): all
    of them, and those whose job the waiting path had not handed to the asynchronous retries."""
    highest: dict[str, int] = {}
    late: list[int] = []
    for message in sent:
        job = int(message["text"].split("w", 1)[0].removeprefix("j").split(" ")[0])
        chat = str(message["chat_id"])
        if job < highest.get(chat, -1):
            late.append(job)
        highest[chat] = max(highest.get(chat, -1), job)
    return {
        "order_violations": len(late),
        "order_violations_unexplained": sum(1 for job in late if f"job-{job}" not in handed_over),
    }


def _job_outcome(statuses: set[str]) -> str:
    """What became of a job, from its chunks' statuses (a chunk refused for good is `dead_lettered`
    once its job is on the dead letters; one still `failed` was to be retried)."""
    if not statuses:
        return "lost"
    for final in ("gone", "unknown"):
        if final in statuses:
            return final
    if statuses & {"failed", "dead_lettered"}:
        return "failed"
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
