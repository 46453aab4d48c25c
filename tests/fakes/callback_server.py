"""A fake Standard Webhooks receiver on a loopback port: the generic webhook's callback URL, or a
relay's (register with `pytest_plugins = ("tests.fakes.callback_server",)` for `fake_callback`).

It checks every request the way a real receiver must: `standard_webhook.verify` over the raw body
bytes with its own copy of the secret and clock. A request that fails is answered 401 and recorded
with `verified=False` and the reason; a verified one is answered 200 `{"id": "cb-<n>"}`
(`answer_with_id=False`: an empty 204). `answer_next` scripts other answers (after verification).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from hermes_gateway.errors import Unauthorized
from hermes_gateway.platforms import standard_webhook
from tests.fakes.loopback import LoopbackFake, Received, ScriptedAnswer

DEFAULT_SECRET = "whsec_" + base64.b64encode(b"callback-secret-for-tests-32byte").decode()


@dataclass(frozen=True)
class CallbackRequest:
    path: str
    headers: dict[str, str]
    raw: bytes
    json: Any
    verified: bool
    reason: str  # why verification failed; "" when it passed


@dataclass
class FakeCallback(LoopbackFake[CallbackRequest]):
    thread_name: ClassVar[str] = "fake-callback"

    secret: str = DEFAULT_SECRET
    clock: Callable[[], float] = time.time
    answer_with_id: bool = True
    _next_id: int = 1

    @property
    def url(self) -> str:
        return self.base_url + "/hooks/replies"

    @property
    def delivered(self) -> list[Any]:
        """The JSON bodies of every verified request, in order."""
        with self._lock:
            return [r.json for r in self.requests if r.verified]

    def _answer(self, request: CallbackRequest) -> ScriptedAnswer:
        if not request.verified:
            with self._lock:
                self.requests.append(request)
            return ScriptedAnswer(401, {"error": request.reason})
        return super()._answer(request)

    def _receive(self, received: Received) -> CallbackRequest:
        # The signature is over the raw bytes.
        path, headers, raw, body = received.path, received.headers, received.raw, received.body
        try:
            standard_webhook.verify(self.secret, headers, raw, self.clock())
        except Unauthorized as exc:
            return CallbackRequest(path, headers, raw, body, False, str(exc))
        return CallbackRequest(path, headers, raw, body, True, "")

    def _default_answer(self, request: CallbackRequest) -> ScriptedAnswer:
        if not self.answer_with_id:
            return ScriptedAnswer(204, b"")
        answer = ScriptedAnswer(200, {"id": f"cb-{self._next_id}"})
        self._next_id += 1
        return answer


@pytest.fixture
def fake_callback() -> Iterator[FakeCallback]:
    with FakeCallback() as fake:
        yield fake
