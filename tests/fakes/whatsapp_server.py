"""A fake WhatsApp Cloud API (Graph API) on a loopback port.

Use the `FakeWhatsApp` context manager (or a fixture in the test module). Point a
`WhatsAppSender` (or `WHATSAPP_API_BASE_URL`) at `fake.base_url` (it ends in `/v21.0`) with
`fake.token`.

- Every request is recorded in `fake.requests`, in arrival order, failures included.
- `POST /<phone_number_id>/messages` answers Meta's success shape with ids `wamid.fake-1`, …;
  `fake.sent` lists the accepted bodies. A wrong bearer token gets Meta's OAuth error (code 190).
- A read receipt (`status: read`, with or without a typing indicator) answers `{"success": true}`;
  `fake.read_receipts` lists them. An answer scripted without `only` never goes to one
  (`only=is_read_receipt` scripts one for them).
- `fake.answer_next(status, meta_error(code, ...))` scripts Meta's error answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from tests.fakes.loopback import LoopbackFake, ScriptedAnswer

DEFAULT_TOKEN = "EAAG-fake-whatsapp-access-token"


def meta_error(code: int, message: str, details: str = "", http_type: str = "OAuthException") -> dict[str, Any]:
    """A Graph API error body as the Cloud API sends it."""
    error: dict[str, Any] = {"message": message, "type": http_type, "code": code, "fbtrace_id": "AbCdEf"}
    if details:
        error["error_data"] = {"messaging_product": "whatsapp", "details": details}
    return {"error": error}


@dataclass(frozen=True)
class RecordedRequest:
    http_method: str
    path: str
    json: Any
    headers: dict[str, str]


@dataclass
class FakeWhatsApp(LoopbackFake[RecordedRequest]):
    thread_name: ClassVar[str] = "fake-whatsapp"
    url_suffix: ClassVar[str] = "/v21.0"

    token: str = DEFAULT_TOKEN
    sent: list[dict[str, Any]] = field(default_factory=list)
    read_receipts: list[dict[str, Any]] = field(default_factory=list)
    _next_id: int = 1

    def _scripted_by_default(self, request: RecordedRequest) -> bool:
        return not is_read_receipt(request)

    def _record(self, http_method: str, path: str, headers: dict[str, str], body: Any) -> RecordedRequest:
        return RecordedRequest(http_method, path, body, headers)

    def _default_answer(self, request: RecordedRequest) -> ScriptedAnswer:
        if request.headers.get("authorization") != f"Bearer {self.token}":
            return ScriptedAnswer(401, meta_error(190, "Invalid OAuth access token - Cannot parse access token"))
        parts = request.path.split("/")  # ["", "v21.0", "<phone_number_id>", "messages"]
        if len(parts) != 4 or parts[1] != "v21.0" or parts[3] != "messages" or not parts[2].isdigit():
            return ScriptedAnswer(400, meta_error(100, "Unsupported post request", http_type="GraphMethodException"))
        payload = request.json if isinstance(request.json, dict) else {}
        if is_read_receipt(request):
            return self._read(payload)
        text = payload.get("text") if isinstance(payload.get("text"), dict) else {}
        if payload.get("messaging_product") != "whatsapp" or not payload.get("to") or not text.get("body"):
            return ScriptedAnswer(400, meta_error(100, "(#100) Invalid parameter"))
        if len(text["body"]) > 4096:
            return ScriptedAnswer(
                400, meta_error(100, "(#100) Param text['body'] must be at most 4096 characters long.")
            )
        wamid = f"wamid.fake-{self._next_id}"
        self._next_id += 1
        self.sent.append({**payload, "id": wamid})
        contacts = [{"input": payload["to"], "wa_id": payload["to"]}]
        return ScriptedAnswer(200, {"messaging_product": "whatsapp", "contacts": contacts, "messages": [{"id": wamid}]})

    def _read(self, payload: dict[str, Any]) -> ScriptedAnswer:
        typing = payload.get("typing_indicator", {"type": "text"})
        if payload.get("messaging_product") != "whatsapp" or not str(payload.get("message_id", "")).startswith(
            "wamid."
        ):
            return ScriptedAnswer(400, meta_error(100, "(#100) Invalid parameter"))
        if not isinstance(typing, dict) or typing.get("type") != "text":
            return ScriptedAnswer(400, meta_error(100, "(#100) Invalid parameter"))
        self.read_receipts.append(payload)
        return ScriptedAnswer(200, {"success": True})


def is_read_receipt(request: RecordedRequest) -> bool:
    return isinstance(request.json, dict) and request.json.get("status") == "read"
