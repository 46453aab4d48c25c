"""`hermes-gateway local` as a new user runs it (what `make run` starts): the real command in a
process of its own, with a bot token, a model provider and a settings file; its banner read from
its output, its health asked over HTTP, a Telegram message answered through the fake Bot API by
the fake model, and the process stopped by its own pid the way `make` stops it (a signal to the
whole process group: two at once), and with a stop signal arriving while the handler of
another runs.

Every wait is bounded; a process still alive at the end is killed by its pid and the test fails.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.e2e.conftest import telegram_update
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram

pytestmark = pytest.mark.e2e

START_SECONDS = 90.0  # a cold start imports boto3, moto and the CDK-free gateway: seconds, more when busy
STOP_SECONDS = 30.0
WEBCHAT_TOKEN = "first-hour-page-token"
WEBHOOK_SECRET = "first-hour-webhook-secret"
READY = "Press Ctrl+C to stop."


def command() -> list[str]:
    """The installed console script beside this interpreter (`.venv/bin/hermes-gateway`)."""
    script = Path(sys.executable).parent / "hermes-gateway"
    return [str(script)] if script.exists() else [sys.executable, "-c", "from hermes_cli import main; main()"]


@dataclass
class Running:
    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    _reader: threading.Thread | None = None

    def start_reading(self) -> None:
        def read() -> None:
            assert self.process.stdout is not None
            for line in self.process.stdout:
                self.lines.append(line.rstrip("\n"))

        self._reader = threading.Thread(target=read, name="local-output", daemon=True)
        self._reader.start()

    def wait_for(self, text: str, timeout: float) -> list[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(text in line for line in self.lines):
                return list(self.lines)
            if self.process.poll() is not None:
                time.sleep(0.2)  # what it printed before it exited
                break
            time.sleep(0.05)
        output = "\n".join(self.lines)
        raise AssertionError(f"no {text!r} from `hermes-gateway local` (exit {self.process.poll()}):\n{output}")

    def exited(self, timeout: float) -> int | None:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def output(self) -> str:
        if self._reader is not None:
            self._reader.join(timeout=5)
        return "\n".join(self.lines)


@contextmanager
def start_local(
    tmp_path: Path, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI, program: list[str] | None = None
) -> Iterator[tuple[Running, Path]]:
    """`hermes-gateway local` (or `program` with its arguments) started as a user starts it."""
    # Given a settings file and the environment a new user sets for a real bot and a real model
    config = tmp_path / "my-gateway.yaml"
    config.write_text("stage: firsthour\nplatforms:\n  telegram:\n    allowed_users: ['42']\n", encoding="utf-8")
    state = tmp_path / "state" / "local.json"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),  # nothing of this run in the user's own ~/.cache
        "TELEGRAM_BOT_TOKEN": fake_telegram.token,
        "TELEGRAM_API_BASE_URL": fake_telegram.base_url,
        "TELEGRAM_WEBHOOK_SECRET": WEBHOOK_SECRET,
        "TELEGRAM_STREAMING": "false",
        "GATEWAY_PROVIDER": "openai",
        "GATEWAY_MODEL": "gpt-first-hour",
        "OPENAI_BASE_URL": fake_openai.base_url,
        "WEBCHAT_TOKEN": WEBCHAT_TOKEN,
        "HERMES_LOCAL_STATE": str(state),
        "PYTHONUNBUFFERED": "1",
    }
    process = subprocess.Popen(
        [*(program or command()), "local", "--port", "0", "--config", str(config)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    running = Running(process)
    running.start_reading()
    try:
        yield running, state
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)  # by its own pid, never by name
            process.wait(10)


@pytest.fixture
def local_command(
    tmp_path: Path, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> Iterator[tuple[Running, Path]]:
    with start_local(tmp_path, fake_telegram, fake_openai) as started:
        yield started


def get_json(url: str, token: str | None = None) -> object:
    request = urllib.request.Request(url, headers={"x-hermes-local-token": token} if token else {})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())


def post_json(url: str, body: object, headers: dict[str, str]) -> int:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json", **headers}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return int(answer.status)


def test_the_local_command_starts_answers_and_stops(
    local_command: tuple[Running, Path], fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    running, state = local_command
    # When the user starts it, Then the banner says what runs: the file, the model, where Telegram goes
    banner = running.wait_for(READY, START_SECONDS)
    text = "\n".join(banner)
    assert "Traceback" not in text
    assert "my-gateway.yaml" in text.splitlines()[0]
    assert "  provider         openai / gpt-first-hour" in banner
    assert f"  Telegram delivery really sends to {fake_telegram.base_url}" in banner
    assert "  WEBCHAT_TOKEN=******** (from the environment)" in banner
    url = next(line.split()[-1] for line in banner if line.startswith("  web chat")).rstrip("/")

    # And its health answers, with every part running
    health = get_json(f"{url}/local/health", WEBCHAT_TOKEN)
    assert isinstance(health, dict) and health["ok"] is True
    # And a Telegram message is answered by the model, through the Bot API
    fake_openai.reply_next("Hello from the model.")
    secret = {"x-telegram-bot-api-secret-token": WEBHOOK_SECRET}
    assert post_json(f"{url}/webhooks/telegram", telegram_update(1, "hi"), secret) == 200
    deadline = time.monotonic() + 30
    while not fake_telegram.sent and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [m["text"] for m in fake_telegram.sent] == ["Hello from the model."]
    # And the functions' log lines in its terminal are warnings and errors only, as the banner's
    # `logs tail --local` says (POWERTOOLS_LOG_LEVEL=INFO shows every line)
    assert not [line for line in running.lines if '"level":"INFO"' in line.replace(" ", "")]
    assert json.loads(state.read_text())["pid"] == running.process.pid

    # When it is stopped as `make` stops it (the process group's SIGTERM: two at once, and Ctrl+C)
    for stop_signal in (signal.SIGTERM, signal.SIGTERM, signal.SIGINT):
        os.kill(running.process.pid, stop_signal)
    # Then it stops, by itself, in time, and says so
    assert running.exited(STOP_SECONDS) == 0, running.output()
    assert "stopped" in running.output().splitlines()
    assert not state.exists()  # the CLI's --local no longer finds a gateway that is gone


# The command run with a tracer that, once a stop signal's handler is running, raises another
# stop signal at each line it executes, however deep (a few dozen at most): a second signal that
# arrives while the handler before it runs, wherever it may be (`make` forwards a stop to the whole
# process group, so two come at once). A handler that takes a lock (threading.Event.set) is then
# re-entered while it holds it, and waits for itself forever.
NESTED_SIGNALS = """
import signal, sys
from hermes_cli import main

handlers, left = set(), [40]

def in_handler(frame):
    while frame is not None:
        if frame.f_code in handlers:
            return True
        frame = frame.f_back
    return False

def on_line(frame, event, arg):
    if event == "line" and left[0] > 0 and in_handler(frame):
        left[0] -= 1
        signal.raise_signal(signal.SIGTERM)
    return on_line

def on_call(frame, event, arg):
    return on_line if in_handler(frame) else None

install = signal.signal

def traced(signum, handler):
    code = getattr(getattr(handler, "__func__", handler), "__code__", None)
    if signum == signal.SIGTERM and code is not None:
        handlers.add(code)
        sys.settrace(on_call)
    return install(signum, handler)

signal.signal = traced
sys.exit(main(sys.argv[1:]))
"""


def test_a_stop_signal_during_the_handling_of_another_never_hangs_the_shutdown(
    tmp_path: Path, fake_telegram: FakeTelegram, fake_openai: FakeOpenAI
) -> None:
    with start_local(tmp_path, fake_telegram, fake_openai, [sys.executable, "-c", NESTED_SIGNALS]) as (running, _):
        running.wait_for(READY, START_SECONDS)
        os.kill(running.process.pid, signal.SIGTERM)
        assert running.exited(STOP_SECONDS) == 0, running.output()
        assert "stopped" in running.output().splitlines()
