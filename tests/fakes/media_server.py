"""A fake file host on a loopback port: the place a platform's media download goes.

`FakeMediaHost` answers `GET <path>` (the path with its query, as requested) from `fake.files`
(path → ScriptedAnswer: bytes with a Content-Type, or a JSON document such as WhatsApp's media
URL lookup). When `fake.authorization` is set, a request without exactly that header answers 401.
Anything else answers 404. Every request is recorded in `fake.requests` as it arrived (a
`Received`, with lower-cased header names); `answer_next` scripts failures (see loopback.py).

`MediaTelegram` is the Bot API that hands over files: `add_file(file_id, data)`, then getFile
answers its path (or Telegram's own "file is too big" past 20 MB) and `GET /file/bot<token>/<path>`
its bytes; `downloads` counts each file's downloads. `FakeSpeech` is an OpenAI-compatible speech
server both ways: every transcription (`POST /v1/audio/transcriptions`) answers `text`, and
`uploads` keeps each request's multipart fields; every synthesis (`POST /v1/audio/speech`, JSON)
answers `voice` (an Ogg Opus voice note) and `spoken` keeps each request's JSON. `minimal_pdf(text)`
is a one-page PDF, `slow_pdf()` a few KB that pypdf spends minutes of CPU on, and `ogg_opus(seconds)`
a voice note whose container says its length.
"""

from __future__ import annotations

import email.parser
import email.policy
import json
import struct
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tests.fakes.loopback import LoopbackFake, Received, ScriptedAnswer
from tests.fakes.telegram_server import FakeTelegram, RecordedRequest


def file(data: bytes, content_type: str = "application/octet-stream") -> ScriptedAnswer:
    return ScriptedAnswer(200, data, {"Content-Type": content_type})


@dataclass
class FakeMediaHost(LoopbackFake[Received]):
    thread_name: ClassVar[str] = "fake-media-host"
    http_methods: ClassVar[frozenset[str]] = frozenset({"GET"})

    files: dict[str, ScriptedAnswer] = field(default_factory=dict)
    authorization: str | None = None  # the Authorization header every download must carry

    def url(self, path: str) -> str:
        return self.base_url + path

    def paths(self) -> list[str]:
        with self._lock:
            return [r.path for r in self.requests]

    def _receive(self, received: Received) -> Received:
        return received

    def _default_answer(self, request: Received) -> ScriptedAnswer:
        if self.authorization is not None and request.headers.get("authorization") != self.authorization:
            return ScriptedAnswer(401, {"error": "unauthorized"})
        found = self.files.get(request.path)
        return found if found is not None else ScriptedAnswer(404, {"error": "not found"})


INVALID_FILE = "Bad Request: invalid file_id"
TOO_BIG = {"ok": False, "error_code": 400, "description": "Bad Request: file is too big"}


@dataclass
class MediaTelegram(FakeTelegram):
    thread_name: ClassVar[str] = "fake-telegram-media"
    files: dict[str, bytes] = field(default_factory=dict)
    downloads: Counter[str] = field(default_factory=Counter)

    def add_file(self, file_id: str, data: bytes) -> None:
        with self._lock:
            self.files[file_id] = data

    def _default_answer(self, request: RecordedRequest) -> ScriptedAnswer:
        prefix = f"/file/bot{self.token}/"
        if request.http_method == "GET" and request.path.startswith(prefix):
            file_id = request.path[len(prefix) :].removeprefix("files/")
            if file_id not in self.files:
                return ScriptedAnswer(404, {"ok": False, "error_code": 404, "description": "Not Found"})
            self.downloads[file_id] += 1
            return ScriptedAnswer(200, self.files[file_id])
        if request.api_method == "getFile" and request.path.startswith(f"/bot{self.token}/"):
            file_id = str((request.json or {}).get("file_id"))
            if file_id not in self.files:
                return ScriptedAnswer(400, {"ok": False, "error_code": 400, "description": INVALID_FILE})
            if len(self.files[file_id]) > 20_000_000:
                return ScriptedAnswer(400, TOO_BIG)
            result = {"file_id": file_id, "file_size": len(self.files[file_id]), "file_path": f"files/{file_id}"}
            return ScriptedAnswer(200, {"ok": True, "result": result})
        return super()._default_answer(request)


@dataclass(frozen=True)
class Upload:
    path: str
    headers: dict[str, str]
    fields: dict[str, tuple[str | None, str, bytes]]  # name -> (file name, content type, bytes)
    body: Any = None  # a JSON request's document


@dataclass
class FakeSpeech(LoopbackFake[Upload]):
    thread_name: ClassVar[str] = "fake-speech"
    url_suffix: ClassVar[str] = "/v1"
    text: str = "remind me to water the plants"
    uploads: list[Upload] = field(default_factory=list)
    voice: bytes = b""  # what a synthesis answers (empty: a 2-second ogg_opus)
    spoken: list[dict[str, Any]] = field(default_factory=list)
    polly: list[dict[str, Any]] = field(default_factory=list)  # Amazon Polly's SynthesizeSpeech requests

    @property
    def polly_url(self) -> str:
        """The endpoint a Polly client is pointed at (AWS_ENDPOINT_URL_POLLY): `POST /v1/speech`."""
        return self.base_url.removesuffix(self.url_suffix)

    def _receive(self, received: Received) -> Upload:
        if received.content_type == "application/json":
            return Upload(received.path, received.headers, {}, json.loads(received.raw or b"null"))
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            f"Content-Type: {received.headers.get('content-type', '')}\r\n\r\n".encode() + received.raw
        )
        fields: dict[str, tuple[str | None, str, bytes]] = {}
        for part in message.iter_parts() if message.is_multipart() else ():
            name = part.get_param("name", header="content-disposition")
            payload = part.get_payload(decode=True)
            if isinstance(name, str) and isinstance(payload, bytes):
                fields[name] = (part.get_filename(), part.get_content_type(), payload)
        return Upload(received.path, received.headers, fields)

    def _default_answer(self, request: Upload) -> ScriptedAnswer:
        if request.path == "/v1/audio/speech" and isinstance(request.body, dict):
            self.spoken.append(request.body)
            return ScriptedAnswer(200, self.voice or ogg_opus(2.0, vendor=b"spoken"), {"Content-Type": "audio/ogg"})
        if request.path == "/v1/speech" and isinstance(request.body, dict):
            self.polly.append(request.body)
            headers = {"Content-Type": "audio/ogg", "x-amzn-RequestCharacters": str(len(request.body.get("Text", "")))}
            return ScriptedAnswer(200, self.voice or ogg_opus(2.0, vendor=b"polly"), headers)
        if request.path != "/v1/audio/transcriptions" or "file" not in request.fields:
            return ScriptedAnswer(400, {"error": {"message": "expected a multipart file"}})
        self.uploads.append(request)
        return ScriptedAnswer(200, {"text": self.text})


def minimal_pdf(text: str) -> bytes:
    """A one-page PDF whose page shows `text` (Helvetica), with a correct cross-reference table."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode("latin-1")
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
        b" /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    return _pdf(objects)


def _pdf(objects: list[bytes]) -> bytes:
    """A PDF of these objects (numbered from 1, the first the catalog) with a correct
    cross-reference table."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def _ogg_crc(data: bytes) -> int:
    """Ogg's page checksum: CRC-32 with polynomial 0x04C11DB7, not reflected, starting at 0."""
    crc = 0
    for byte in data:
        crc ^= byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7) & 0xFFFFFFFF if crc & 0x80000000 else (crc << 1) & 0xFFFFFFFF
    return crc


def _ogg_page(packet: bytes, sequence: int, granule: int, flags: int) -> bytes:
    lacing = [255] * (len(packet) // 255) + [len(packet) % 255]
    header = struct.pack("<4sBBqIIIB", b"OggS", 0, flags, granule, 0x4E6F7465, sequence, 0, len(lacing))
    page = header + bytes(lacing) + packet
    return page[:22] + struct.pack("<I", _ogg_crc(page)) + page[26:]


def ogg_opus(seconds: float, size: int = 2048, vendor: bytes = b"test") -> bytes:
    """A voice note as Telegram and WhatsApp send one: an Ogg Opus stream whose last page says it
    lasts `seconds` (what mutagen reads), about `size` bytes of it. The audio is filler: only its
    container is read here, and the fake speech server hears what it is told to. `vendor` (in its
    tags) tells one file from another."""
    pre_skip = 312
    head = b"OpusHead" + struct.pack("<BBHIhB", 1, 1, pre_skip, 48000, 0, 0)
    tags = b"OpusTags" + struct.pack("<I", len(vendor)) + vendor + struct.pack("<I", 0)
    pages = [_ogg_page(head, 0, 0, 0x02), _ogg_page(tags, 1, 0, 0)]
    filler = bytes((n * 37) % 251 for n in range(max(size - 200, 64)))
    chunks = [filler[i : i + 4000] for i in range(0, len(filler), 4000)]
    end = pre_skip + int(seconds * 48000)
    for n, chunk in enumerate(chunks, start=2):
        last = n == len(chunks) + 1
        granule = end if last else pre_skip + int(seconds * 48000 * (n - 1) / len(chunks))
        pages.append(_ogg_page(chunk, n, granule, 0x04 if last else 0))
    return b"".join(pages)


def slow_pdf(pages: int = 20, operators: int = 150_000, operator: bytes = b"0 0 Td ") -> bytes:
    """A few KB of PDF whose pages all draw one compressed content stream of `operators` text
    operators (by default moves that show nothing, so little text comes of it): pypdf parses the
    whole stream again for every page, about 2 s of CPU each here (issue 36's slow PDF)."""
    stream = zlib.compress(b"BT /F1 12 Tf 72 720 Td " + operator * operators + b"(a) Tj ET", 9)
    kids = " ".join(f"{5 + n} 0 R" for n in range(pages)).encode()
    page = (
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
        b" /Resources << /Font << /F1 3 0 R >> >> >>"
    )
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % pages,
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
        *[page] * pages,
    ]
    return _pdf(objects)
