"""A fake Amazon SES v2 API (rest-json, `POST /v2/email/outbound-emails`) on a loopback port.

Point `platforms.email.api_base_url` (EMAIL_API_BASE_URL, or `SesMailer(endpoint_url=...)`) at
`fake.base_url`. Every request is recorded with its decoded JSON body; `fake.sent` lists the raw
messages accepted (base64-decoded), answered with ids `fake-ses-1`, ... `ses_error(...)` builds
an error answer the way SES v2 sends one (the type in `x-amzn-ErrorType`, the message in the body).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tests.fakes.loopback import LoopbackFake, ScriptedAnswer

SEND_PATH = "/v2/email/outbound-emails"


def ses_error(status: int, error_type: str, message: str) -> dict[str, Any]:
    """Keyword arguments for `answer_next`: SES v2's error answer."""
    return {"status": status, "body": {"message": message}, "headers": {"x-amzn-ErrorType": error_type}}


@dataclass(frozen=True)
class RecordedRequest:
    http_method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class FakeSes(LoopbackFake[RecordedRequest]):
    thread_name: ClassVar[str] = "fake-ses"

    sent: list[dict[str, Any]] = field(default_factory=list)
    _next_id: int = 1

    def _record(self, http_method: str, path: str, headers: dict[str, str], body: Any) -> RecordedRequest:
        return RecordedRequest(http_method, path, headers, body if isinstance(body, dict) else {})

    def _default_answer(self, request: RecordedRequest) -> ScriptedAnswer:
        if request.path != SEND_PATH:
            return ScriptedAnswer(404, {"message": "not found"}, {"x-amzn-ErrorType": "NotFoundException"})
        raw = (request.body.get("Content") or {}).get("Raw") or {}
        if not raw.get("Data") or not request.body.get("FromEmailAddress"):
            return ScriptedAnswer(400, {"message": "missing content"}, {"x-amzn-ErrorType": "BadRequestException"})
        message_id = f"fake-ses-{self._next_id}"
        self._next_id += 1
        self.sent.append({**request.body, "raw": base64.b64decode(raw["Data"]), "message_id": message_id})
        return ScriptedAnswer(200, {"MessageId": message_id})
