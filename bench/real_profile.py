"""A real conversation's cost: the message bench's meter and price model over a model that takes
seconds, with the answer streamed as shipped for Telegram.

The echo model answers in microseconds; a real one takes seconds, and Lambda and Express bill
every one of them. Here local mode talks to an OpenAI-compatible fake on loopback
(tests/fakes/openai_server.py, `ModelPace`) that writes its first token after 0.8 s and then 40
tokens a second. Answers are 150 to 600 tokens (log-uniform: median 300, mean 325), one turn in
five first calls one tool (the memory tool's add or session_search, alternately) and answers
after its result, one message in ten is a photo (200 KB, with a caption: fetched from Telegram,
stored, and sent to the model as an image part), one in ten is delivered twice (a platform
retry). The sessions are message_cost's mix (half DMs, a quarter groups, a quarter forum topics);
each person sends the next message a second after the whole answer is shown.

The run is made twice with the same messages and the same answers, each in its own interpreter:
`streamed` as shipped (Telegram's `streaming` on: the answer posted after 1.5 s, edited in place)
and `plain` (streaming off: the answer sent whole when the model is done). Their difference, per
million answers that streamed, is what streaming costs (`streaming_extra_usd_per_million`).

Pricing (bench/pricing.py, `per_invocation`): every invocation is billed by its own CPU model
(CPU time at its memory size's share of a vCPU, this machine's core standing in for an arm64
Lambda's, plus a round trip per request), plus the model's seconds (Lambda bills each
millisecond), plus what it slept (a stream keeping its pace); every Express execution by its
tasks' sum in 100 ms steps at 64 MB. `waiting` is what the model's seconds add (the same run priced
without them), `work` everything else. Before the run, a few messages go one at a time with
nothing else running: the seconds from the webhook to the typing indicator and to the model
request are taken from them (local mode on this shared 2-core machine: the load average is kept
with the results).

Usage: .venv/bin/python bench/real_profile.py [--messages N] [--sessions N] [--solo N] [--quick]
       .venv/bin/python bench/real_profile.py --variant streamed|plain --out FILE   (one run)
Writes bench/results/real-profile-latest.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "layers" / "common", ROOT / "local"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from bench.message_cost import (  # noqa: E402
    CALL_KEYS,
    Session,
    by_service_operation,
    calls_table,
    local_gateway,
    make_sessions,
    post_update,
    table_specs,
    telegram_update,
)
from bench.meter import Invocation, Meter, count_sleeps, counted_logs, sleeps_counted  # noqa: E402
from bench.pricing import PRICES, billed, cpu_share, memory_mb, price, round_trip_ms  # noqa: E402
from tests.fakes.loopback import ScriptedAnswer  # noqa: E402
from tests.fakes.media_server import MediaTelegram  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI, ModelPace, completion, tool_call  # noqa: E402
from tests.fakes.telegram_server import RecordedRequest  # noqa: E402

RESULTS = ROOT / "bench" / "results"
PACE = ModelPace(first_token_seconds=0.8, tokens_per_second=40.0)
TOKENS = (150, 600)  # an answer's length, log-uniform: the median is their geometric mean (300)
TOOL_SHARE = 0.2
PHOTO_SHARE = 0.1
RETRY_SHARE = 0.1
THINK_SECONDS = 1.0
PHOTO_BYTES = 200_000
VARIANTS = ("streamed", "plain")
_MESSAGE = re.compile(r"message (\d+):")
_ANSWER = re.compile(r"\(answer:(\d+)\)")
_WORDS = ("the", "queue", "deploy", "lambda", "table", "is", "ready", "and", "cost", "check", "logs", "green",
          "function", "memory", "seconds", "retry", "stream", "answer", "model", "token")  # fmt: skip


# --------------------------------------------------------------------------------------------------
# The messages and the model's answers


@dataclass(frozen=True)
class Message:
    number: int
    session: Session
    tokens: int  # the answer's length
    tool: str | None  # the tool the model calls first (None: it answers at once)
    photo: bool
    retried: bool  # the platform delivers it twice


def make_plan(messages: int, sessions: int, seed: int, first: int = 0) -> list[Message]:
    """`messages` over `sessions` (message_cost's mix): answer lengths spread over TOKENS in even
    quantiles, shuffled; exactly a fifth with a tool, a tenth photos, a tenth retried."""
    rng = random.Random(seed)
    people = make_sessions(sessions, first=first)
    low, high = TOKENS
    lengths = [round(low * (high / low) ** ((i + 0.5) / messages)) for i in range(messages)]
    rng.shuffle(lengths)
    tools = set(rng.sample(range(messages), round(messages * TOOL_SHARE)))
    photos = set(rng.sample(range(messages), round(messages * PHOTO_SHARE)))
    retried = set(rng.sample(range(messages), round(messages * RETRY_SHARE)))
    plan = []
    for n in range(messages):
        tool = ("memory", "session_search")[len([t for t in tools if t < n]) % 2] if n in tools else None
        number = 1_000 * (first + 1) + n
        plan.append(Message(number, people[n % sessions], lengths[n], tool, n in photos, n in retried))
    return plan


def update_of(message: Message) -> dict[str, Any]:
    """The Telegram update a person sends: a text, or a photo with its caption."""
    words = random.Random(message.number).choices(_WORDS, k=10)
    text = f"message {message.number}: " + " ".join(words) + "?"
    update = telegram_update(message.number, text, message.session)
    if message.photo:
        body = update["message"]
        body["caption"] = body.pop("text")
        body["photo"] = [
            {"file_id": "photo-small", "file_unique_id": "ps", "width": 90, "height": 67, "file_size": 1_500},
            {"file_id": "photo", "file_unique_id": "p", "width": 1280, "height": 960, "file_size": PHOTO_BYTES},
        ]
    return update


def answer_text(message: Message) -> str:
    """`message.tokens` tokens of words (a line break now and then), the last one naming the
    message answered, so the platform's side sees when the whole answer is shown."""
    rng = random.Random(-message.number)
    words = [rng.choice(_WORDS) + ("\n" if rng.random() < 0.05 else " ") for _ in range(message.tokens - 1)]
    return "".join(words) + f"(answer:{message.number})"


class Model:
    """The fake model's side of the plan: a request's answer by the message it answers (the last
    "message N:" of its last user message), and when each message's first request came."""

    def __init__(self, plan: list[Message]) -> None:
        self.by_number = {m.number: m for m in plan}
        self.asked: dict[int, float] = {}  # message -> its first model request (monotonic)
        self.requests: Counter[str] = Counter()

    def answer(self, request: Any) -> dict[str, Any] | None:
        wire = request.get("messages") if isinstance(request, dict) else None
        if not isinstance(wire, list):
            return None
        users = [i for i, m in enumerate(wire) if m.get("role") == "user"]
        found = _MESSAGE.findall(_text_of(wire[users[-1]])) if users else []
        message = self.by_number.get(int(found[-1])) if found else None
        if message is None:
            return None  # the warm-up, a memory flush: the default answer
        self.asked.setdefault(message.number, time.monotonic())
        prompt = len(json.dumps(request)) // 4
        if message.tool and not any(m.get("role") == "tool" for m in wire[users[-1] :]):
            self.requests["tool call"] += 1
            arguments = (
                {"action": "add", "text": f"asked about the deploy queue in message {message.number}"}
                if message.tool == "memory"
                else {"query": "deploy queue"}
            )
            call = tool_call(f"call_{message.number}", message.tool, arguments)
            return completion(None, prompt_tokens=prompt, completion_tokens=20, tool_calls=[call],
                              finish_reason="tool_calls", model="gpt-4o-mini")  # fmt: skip
        self.requests["answer"] += 1
        return completion(answer_text(message), prompt_tokens=prompt, completion_tokens=message.tokens,
                          model="gpt-4o-mini")  # fmt: skip


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return str(content or "")


# --------------------------------------------------------------------------------------------------
# The platform: Telegram taking posts, edits and chat actions, handing over the photo


@dataclass
class RealTelegram(MediaTelegram):
    """MediaTelegram that notes when each answer is first shown whole (its last token in a post or
    an edit) and every chat action's time, by chat."""

    thread_name: ClassVar[str] = "real-profile-telegram"
    shown: dict[int, float] = field(default_factory=dict)  # message -> when its whole answer showed
    shown_by: dict[int, str] = field(default_factory=dict)  # message -> the method that showed it whole
    typing: list[tuple[float, str, str]] = field(default_factory=list)  # (monotonic, chat, thread)
    methods: Counter[str] = field(default_factory=Counter)
    _changed: threading.Condition = field(default_factory=threading.Condition)

    def _default_answer(self, request: RecordedRequest) -> ScriptedAnswer:
        answer = super()._default_answer(request)
        body = request.json if isinstance(request.json, dict) else {}
        self.methods[request.api_method or f"file {request.http_method}"] += 1
        now = time.monotonic()
        if request.api_method == "sendChatAction":
            self.typing.append((now, str(body.get("chat_id")), str(body.get("message_thread_id") or "")))
        elif answer.status == 200 and request.api_method in ("sendMessage", "editMessageText"):
            found = _ANSWER.search(str(body.get("text") or ""))
            if found and int(found.group(1)) not in self.shown:
                with self._changed:
                    self.shown[int(found.group(1))] = now
                    self.shown_by[int(found.group(1))] = request.api_method
                    self._changed.notify_all()
        return answer

    def wait_shown(self, number: int, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        with self._changed:
            while number not in self.shown:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"the answer to message {number} was not shown in {timeout} s")
                self._changed.wait(left)
            return self.shown[number]

    def first_typing(self, session: Session, after: float) -> float | None:
        chat, thread = session.key
        with self._lock:
            return min((t for t, c, th in self.typing if c == chat and th == thread and t >= after), default=None)


# --------------------------------------------------------------------------------------------------
# One run


@dataclass
class Timings:
    posted: dict[int, float] = field(default_factory=dict)

    def seconds(self, telegram: RealTelegram, model: Model, plan: list[Message]) -> dict[str, Any]:
        """From the webhook to the typing indicator, to the model's request, to the whole answer."""
        typing, asked, shown = [], [], []
        for message in plan:
            posted = self.posted.get(message.number)
            if posted is None:
                continue
            first = telegram.first_typing(message.session, posted)
            if first is not None:
                typing.append(first - posted)
            if message.number in model.asked:
                asked.append(model.asked[message.number] - posted)
            if message.number in telegram.shown:
                shown.append(telegram.shown[message.number] - posted)
        return {"to_typing_indicator": _spread(typing), "to_model_request": _spread(asked),
                "to_whole_answer": _spread(shown)}  # fmt: skip


def _spread(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    return {
        "n": len(values),
        "p50": round(statistics.median(values), 3),
        "p90": round(ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)], 3),
        "max": round(ordered[-1], 3),
    }


def converse(url: str, telegram: RealTelegram, messages: list[Message], timings: Timings, think: float) -> None:
    """One person: each message (twice when the platform retries it), then the whole answer, then a pause."""
    for message in messages:
        timings.posted[message.number] = time.monotonic()
        for _ in range(2 if message.retried else 1):
            if post_update(url, update_of(message)) != 200:
                raise RuntimeError("the webhook was refused")
        telegram.wait_shown(message.number, timeout=120)
        if think:
            time.sleep(think)


def run_variant(variant: str, messages: int, sessions: int, solo: int, seed: int, concurrency: int) -> dict[str, Any]:
    """One run: the solo messages (timings), then the plan's sessions at once (the cost)."""
    from bench.media_cost import PHOTO

    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    alone = make_plan(solo, min(solo, 4), seed + 1, first=50)
    plan = make_plan(messages, sessions, seed)
    model = Model(alone + plan)
    meter = Meter(streams=True)
    load_before = os.getloadavg()
    started = time.perf_counter()
    with RealTelegram() as telegram, FakeOpenAI() as fake:
        telegram.add_file("photo", PHOTO)
        fake.pace, fake.answer_with = PACE, model.answer
        environ = {
            "TELEGRAM_BOT_TOKEN": telegram.token,
            "TELEGRAM_API_BASE_URL": telegram.base_url,
            "TELEGRAM_STREAMING": "true" if variant == "streamed" else "false",
            "GATEWAY_PROVIDER": "openai",
            "GATEWAY_MODEL": "gpt-4o-mini",
            "OPENAI_BASE_URL": fake.base_url,
        }
        meter.install()
        try:
            with local_gateway(environ) as (gateway, _):
                _check_sleeps_counted()
                meter.table_specs = table_specs()
                warm = Session("dm", 9_999, 9_999)
                if post_update(gateway.url, telegram_update(1, "warm up", warm)) != 200:
                    raise RuntimeError("the webhook was refused")
                meter.wait_idle(quiet=2.0, timeout=60)
                meter.reset()
                quiet = Timings()
                for message in alone:  # one at a time, nothing else running
                    converse(gateway.url, telegram, [message], quiet, 0)
                    meter.wait_idle()
                meter.wait_idle()
                alone_invocations = list(meter.invocations)
                meter.reset()
                busy = Timings()
                by_session: dict[Session, list[Message]] = {}
                for message in plan:
                    by_session.setdefault(message.session, []).append(message)
                run_started = time.perf_counter()
                platform_before = Counter(telegram.methods)
                with counted_logs() as logs:
                    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="person") as pool:
                        talks = [pool.submit(converse, gateway.url, telegram, m, busy, THINK_SECONDS)
                                 for m in by_session.values()]  # fmt: skip
                        for talk in talks:
                            talk.result()
                    meter.wait_idle(quiet=1.0, timeout=60)
                run_seconds = time.perf_counter() - run_started
        finally:
            meter.uninstall()
        webhook_requests = sum(2 if m.retried else 1 for m in plan)
        priced = price(meter, messages, webhook_requests, logs.bytes, len(logs.metrics), per_invocation=True)
        work = price(_without_model_waits(meter), messages, webhook_requests, logs.bytes, len(logs.metrics),
                     per_invocation=True)  # fmt: skip
        platform = Counter(telegram.methods)
        platform.subtract(platform_before)
        edited = sum(1 for m in plan if telegram.shown_by.get(m.number) == "editMessageText")
        report = {
            "variant": variant,
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "messages": messages,
            "sessions": sessions,
            "cost_per_million_usd": priced["cost_per_million_usd"],
            "cost_by_service": priced["cost_by_service"],
            "work_usd_per_million": work["cost_per_million_usd"],
            "waiting_usd_per_million": round(priced["cost_per_million_usd"] - work["cost_per_million_usd"], 2),
            "model_seconds_per_message": round(sum(meter.model_seconds) / messages, 3),
            "model_requests": dict(model.requests),
            "seconds_from_webhook_alone": quiet.seconds(telegram, model, alone),
            "seconds_to_model_request_modelled": to_model_request(alone_invocations),
            "seconds_from_webhook_in_the_run": busy.seconds(telegram, model, plan),
            "platform_requests_per_message": {k: round(v / messages, 3) for k, v in sorted(platform.items()) if v},
            "answers_shown_whole_by_an_edit": round(edited / messages, 3),
            "aws_requests_per_message": by_service_operation(meter, messages),
            "aws_requests_per_message_total": round(sum(meter.calls.values()) / messages, 3),
            "function_requests": calls_table(meter.calls, messages, CALL_KEYS),
            "per_message": priced["per_message"],
            "lambda_by_function": priced["lambda_by_function"],
            "lambda_slept_seconds_per_message": round(sum(i.slept for i in meter.invocations) / messages, 3),
            "requests_overlapping_the_model_per_message": round(
                sum(i.overlapped for i in meter.invocations) / messages, 3
            ),
            "failed_invocations": meter.failed_invocations,
            "run_seconds": round(run_seconds, 1),
            "seconds": round(time.perf_counter() - started, 1),
            "load_average_before_and_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        }  # fmt: skip
    return report


def to_model_request(invocations: list[Invocation]) -> dict[str, Any]:
    """What the functions do before the model's request, at their deployed memory sizes (the CPU
    model: CPU time at the size's share of a vCPU, a round trip per request), from the messages
    sent alone: the ingress, the router and the Respond task's work before it asks. Not in it:
    Lambda's stream poller (it reads a shard about four times a second), Step Functions' own
    start, and a cold start (the agent's import, `cold_start_seconds`)."""
    memory = memory_mb()
    parts: dict[str, list[float]] = {"ingress/api": [], "router/stream": [], "agent/respond": []}
    first_respond = False  # the message's first Respond task (a tool turn's second one asks again)
    for i in sorted(invocations, key=lambda i: i.started):
        if i.key == "router/stream":
            first_respond = True
        if i.key not in parts or (i.key == "agent/respond" and not first_respond):
            continue
        if i.key == "agent/respond":
            first_respond = False
            trips = sum(round_trip_ms(s, o) for s, o in i.trips_to_model)
            parts[i.key].append(i.cpu_to_model_seconds * 1000 / cpu_share(memory["agent"]) + trips)
        else:
            parts[i.key].append(billed(i, memory[i.function]).model_ms)
    means = {k: round(statistics.fmean(v), 1) if v else 0.0 for k, v in parts.items()}
    out: dict[str, Any] = {"seconds": round(sum(means.values()) / 1000, 3), "ms_by_step": means}
    cold = RESULTS / "cold-start-latest.json"
    if cold.exists():
        imported = json.loads(cold.read_text(encoding="utf-8"))["handlers"]["agent"]["import_seconds"]
        out["agent_cold_start_seconds"] = round(imported / cpu_share(memory["agent"]), 2)
    return out


def _check_sleeps_counted() -> None:
    from hermes_gateway.services.delivery import DeliveryDeps
    from hermes_gateway.services.turn.deps import TurnDeps

    for kind in (TurnDeps, DeliveryDeps):
        if not sleeps_counted(kind.__dataclass_fields__["sleep"].default):
            raise RuntimeError(f"{kind.__name__}.sleep was bound before bench.meter.count_sleeps()")


def _without_model_waits(meter: Meter) -> Meter:
    """The same run with the model answering at once: what is left is the work."""
    import copy
    import dataclasses

    still = copy.copy(meter)
    still.invocations = [dataclasses.replace(i, model_seconds=0.0) for i in meter.invocations]
    return still


# --------------------------------------------------------------------------------------------------
# Both runs, and what streaming adds


def compare(streamed: dict[str, Any], plain: dict[str, Any]) -> dict[str, Any]:
    """What a streamed answer costs over the same answer sent whole, per million answers that
    streamed (an answer of this profile takes over 4 s: each streams, its message edited)."""
    share = streamed["answers_shown_whole_by_an_edit"]
    if share <= 0:
        raise RuntimeError("no answer of the streamed run was streamed")
    services = sorted(set(streamed["cost_by_service"]) | set(plain["cost_by_service"]))

    def more(get: Callable[[dict[str, Any]], float], digits: int) -> float:
        return round(get(streamed) - get(plain), digits)

    return {
        "streaming_extra_usd_per_million": round(more(lambda r: r["cost_per_million_usd"], 4) / share, 2),
        "streaming_extra_by_service": {
            s: round(streamed["cost_by_service"].get(s, 0.0) - plain["cost_by_service"].get(s, 0.0), 4)
            for s in services
        },
        "streamed_share": share,
        "streaming_extra_dynamodb_units_per_message": {
            "read": more(lambda r: r["per_message"]["dynamodb_read_units"], 3),
            "write": more(lambda r: r["per_message"]["dynamodb_write_units"], 3),
        },
        "streaming_extra_lambda_slept_seconds_per_message": more(lambda r: r["lambda_slept_seconds_per_message"], 3),
    }


def run(messages: int, sessions: int, solo: int, seed: int, concurrency: int) -> dict[str, Any]:
    runs = {}
    for variant in VARIANTS:
        out = RESULTS / f".real-profile-{variant}.json"
        command = [sys.executable, str(Path(__file__)), "--variant", variant, "--out", str(out),
                   "--messages", str(messages), "--sessions", str(sessions), "--solo", str(solo),
                   "--seed", str(seed), "--concurrency", str(concurrency)]  # fmt: skip
        print(f"== real profile, {variant}: {messages} messages over {sessions} sessions", flush=True)
        subprocess.run(command, cwd=ROOT, check=True, timeout=1800)
        runs[variant] = json.loads(out.read_text(encoding="utf-8"))
        out.unlink()
    streamed, plain = runs["streamed"], runs["plain"]
    memory = memory_mb()
    return {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "profile": PROFILE,
        "cost_per_million_usd_real_profile": streamed["cost_per_million_usd"],
        "cost_per_million_usd_real_profile_split": {
            "work": streamed["work_usd_per_million"],
            "waiting": streamed["waiting_usd_per_million"],
        },
        "model_seconds_per_message": streamed["model_seconds_per_message"],
        "model_wait_usd_per_million_per_model_second_measured": round(
            streamed["waiting_usd_per_million"] / streamed["model_seconds_per_message"], 2
        ),
        "model_wait_usd_per_million_per_model_second": _model_wait(memory),
        **compare(streamed, plain),
        "seconds_from_webhook_local_mode": streamed["seconds_from_webhook_alone"],
        "seconds_to_model_request_modelled": streamed["seconds_to_model_request_modelled"],
        "memory_mb": memory,
        "runs": runs,
        "prices_recorded": PRICES["recorded"],
        "caveats": CAVEATS,
    }


PROFILE = {
    "model": f"first token after {PACE.first_token_seconds} s, then {PACE.tokens_per_second:g} tokens a second",
    "answer_tokens": f"{TOKENS[0]} to {TOKENS[1]}, log-uniform (median {round(math.sqrt(TOKENS[0] * TOKENS[1]))})",
    "tool_turns": TOOL_SHARE,
    "photos": PHOTO_SHARE,
    "platform_retries": RETRY_SHARE,
    "think_seconds": THINK_SECONDS,
    "sessions": "half DMs, a quarter groups, a quarter forum topics",
    "streaming": "Telegram's defaults: posted after 1.5 s or 200 characters, edited 1 s apart in a DM, 3 in a group",
}


def _model_wait(memory: dict[str, int]) -> float:
    from bench.pricing import _model_wait as model_wait

    return float(model_wait(memory)["total"])


CAVEATS = [
    "Lambda's CPU: this machine's core stands in for an arm64 Lambda's vCPU (1 vCPU at 1,769 MB, a share below); "
    "Graviton's speed per core differs, so the CPU part of `work` may be off by that ratio (the waiting is not)",
    "the model's seconds are what the fake on loopback takes (0.8 s, then 40 tokens a second); a real model's "
    "request adds its network round trip, and its time to the first token varies",
    "every invocation and execution is priced by its own figures from the run (10 people at once, mostly waiting "
    "on the model); the timings from the webhook come from the messages sent alone first, in local mode on a "
    "shared 2-core machine (its load average is in each run)",
    "model tokens are not priced: AWS only",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=60)
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=10, help="people talking at once")
    parser.add_argument("--solo", type=int, default=6, help="messages sent alone first (the timings)")
    parser.add_argument("--seed", type=int, default=38)
    parser.add_argument("--quick", action="store_true", help="30 messages, 3 alone")
    parser.add_argument("--variant", choices=VARIANTS, help="one run only, written to --out")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.quick:
        args.messages, args.solo = 30, 3
    if args.variant:
        count_sleeps()  # before the gateway's modules are imported (bench/meter.py; checked once they are)
        report = run_variant(args.variant, args.messages, args.sessions, args.solo, args.seed, args.concurrency)
        (args.out or RESULTS / f"real-profile-{args.variant}.json").write_text(json.dumps(report, indent=2) + "\n")
        return
    report = run(args.messages, args.sessions, args.solo, args.seed, args.concurrency)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "real-profile-latest.json"
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    split = report["cost_per_million_usd_real_profile_split"]
    print(
        f"real profile: {report['cost_per_million_usd_real_profile']} USD per million (work {split['work']}, "
        f"waiting {split['waiting']}; {report['model_seconds_per_message']} model seconds a message)"
    )
    print(f"streaming adds {report['streaming_extra_usd_per_million']} USD per million answers")
    print(f"model wait: {report['model_wait_usd_per_million_per_model_second_measured']} USD per million per second")
    print(f"written to {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
