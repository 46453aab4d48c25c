"""Multipart uploads on a loopback fake: `form_fields` reads a recorded multipart body, and
`FakeApi` answers any path from a table (`routes`: path -> answer), recording each request as it
arrived (`Received`, raw body included), for the senders' media uploads and the platforms' file
downloads. A route whose key ends in `*` answers every path that starts with what comes before it
(a Matrix event's transaction id); `fallback`, when set, answers any other path (a platform's calls
a test does not look at, such as a typing indicator)."""

from __future__ import annotations

from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from typing import ClassVar

from tests.fakes.loopback import LoopbackFake, Received, ScriptedAnswer


@dataclass(frozen=True)
class FormField:
    value: bytes
    filename: str | None = None
    content_type: str = ""

    @property
    def text(self) -> str:
        return self.value.decode("utf-8")


def form_fields(content_type: str, raw: bytes) -> dict[str, FormField]:
    """The fields of a `multipart/form-data` body (`content_type` is the request's header)."""
    message = BytesParser(policy=HTTP).parsebytes(b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + raw)
    assert message.is_multipart(), "not a multipart body"
    found = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        found[str(name)] = FormField(
            payload if isinstance(payload, bytes) else b"", part.get_filename(), part.get_content_type()
        )
    return found


def fields_of(request: Received) -> dict[str, FormField]:
    return form_fields(request.headers.get("content-type", ""), request.raw)


@dataclass
class FakeApi(LoopbackFake[Received]):
    thread_name: ClassVar[str] = "fake-api"
    http_methods: ClassVar[frozenset[str]] = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})

    routes: dict[str, ScriptedAnswer] = field(default_factory=dict)  # path (without the query) -> answer
    fallback: ScriptedAnswer | None = None

    def to(self, path: str) -> list[Received]:
        with self._lock:
            return [r for r in self.requests if r.path.split("?", 1)[0] == path]

    def _receive(self, received: Received) -> Received:
        return received

    def _default_answer(self, request: Received) -> ScriptedAnswer:
        path = request.path.split("?", 1)[0]
        found = self.routes.get(path)
        if found is None:
            prefixes = [key for key in self.routes if key.endswith("*") and path.startswith(key[:-1])]
            found = self.routes[max(prefixes, key=len)] if prefixes else self.fallback
        return found if found is not None else ScriptedAnswer(404, {"error": "not found"})
