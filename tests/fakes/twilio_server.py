"""A fake Twilio REST API (2010-04-01) on a loopback port: Messages and IncomingPhoneNumbers.

Use `FakeTwilio` as a context manager (or a fixture in the test module). Point the sender (or
`SMS_API_BASE_URL`) at `fake.base_url` with `fake.account_sid` and `fake.auth_token`.

- Every request is recorded in `fake.requests`, with its form-encoded body decoded in `form`.
- `POST .../Messages.json` answers 201 with sids `SMfake1`, …; `fake.sent` lists accepted forms.
- `GET .../IncomingPhoneNumbers.json?PhoneNumber=` lists `fake.numbers` (keyed by the E.164
  number); `POST .../IncomingPhoneNumbers/<PN sid>.json` updates `sms_url`/`sms_method`.
- Wrong basic-auth credentials get Twilio's 20003 answer; `twilio_error(...)` builds others.
"""

from __future__ import annotations

import base64
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tests.fakes.loopback import LoopbackFake, ScriptedAnswer

DEFAULT_SID = "AC" + "0123456789abcdef" * 2
DEFAULT_TOKEN = "fake-twilio-auth-token-0123456789"
DEFAULT_NUMBER = "+15005550006"


def twilio_error(status: int, code: int, message: str) -> dict[str, Any]:
    return {
        "code": code,
        "message": message,
        "more_info": f"https://www.twilio.com/docs/errors/{code}",
        "status": status,
    }


@dataclass(frozen=True)
class RecordedRequest:
    http_method: str
    path: str  # without the query
    query: dict[str, str]
    form: dict[str, str]
    headers: dict[str, str]


@dataclass
class FakeTwilio(LoopbackFake[RecordedRequest]):
    thread_name: ClassVar[str] = "fake-twilio"
    http_methods: ClassVar[frozenset[str]] = frozenset({"GET", "POST"})

    account_sid: str = DEFAULT_SID
    auth_token: str = DEFAULT_TOKEN
    numbers: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {
            DEFAULT_NUMBER: {
                "sid": "PN" + "f" * 32,
                "phone_number": DEFAULT_NUMBER,
                "sms_url": "",
                "sms_method": "POST",
            }
        }
    )
    sent: list[dict[str, str]] = field(default_factory=list)
    _next_id: int = 1

    def _record(self, http_method: str, path: str, headers: dict[str, str], body: Any) -> RecordedRequest:
        parts = urllib.parse.urlsplit(path)
        form = body if isinstance(body, dict) else {}
        return RecordedRequest(http_method, parts.path, dict(urllib.parse.parse_qsl(parts.query)), form, headers)

    def _default_answer(self, request: RecordedRequest) -> ScriptedAnswer:
        expected = base64.b64encode(f"{self.account_sid}:{self.auth_token}".encode()).decode()
        if request.headers.get("authorization") != f"Basic {expected}":
            return ScriptedAnswer(401, twilio_error(401, 20003, "Authenticate"))
        prefix = f"/2010-04-01/Accounts/{self.account_sid}/"
        if not request.path.startswith(prefix):
            return ScriptedAnswer(404, twilio_error(404, 20404, "The requested resource was not found"))
        resource = request.path.removeprefix(prefix)
        if resource == "Messages.json" and request.http_method == "POST":
            return self._create_message(request.form)
        if resource == "IncomingPhoneNumbers.json" and request.http_method == "GET":
            wanted = request.query.get("PhoneNumber")
            found = [dict(n) for number, n in self.numbers.items() if wanted in (None, number)]
            return ScriptedAnswer(200, {"incoming_phone_numbers": found, "page": 0, "page_size": 50})
        if resource.startswith("IncomingPhoneNumbers/") and request.http_method == "POST":
            return self._update_number(resource.removeprefix("IncomingPhoneNumbers/").removesuffix(".json"), request)
        return ScriptedAnswer(404, twilio_error(404, 20404, "The requested resource was not found"))

    def _create_message(self, form: dict[str, str]) -> ScriptedAnswer:
        if not form.get("To") or not form.get("From") or not form.get("Body"):
            return ScriptedAnswer(400, twilio_error(400, 21604, "A 'To', 'From' and 'Body' are required"))
        if len(form["Body"]) > 1600:
            return ScriptedAnswer(
                400, twilio_error(400, 21617, "The concatenated message body exceeds 1600 characters")
            )
        sid = f"SMfake{self._next_id}"
        self._next_id += 1
        self.sent.append({**form, "sid": sid})
        return ScriptedAnswer(201, {"sid": sid, "status": "queued", "to": form["To"], "from": form["From"]})

    def _update_number(self, sid: str, request: RecordedRequest) -> ScriptedAnswer:
        number = next((n for n in self.numbers.values() if n["sid"] == sid), None)
        if number is None:
            return ScriptedAnswer(404, twilio_error(404, 20404, "The requested resource was not found"))
        for form_name, attr in (("SmsUrl", "sms_url"), ("SmsMethod", "sms_method")):
            if form_name in request.form:
                number[attr] = request.form[form_name]
        return ScriptedAnswer(200, dict(number))
