"""E-mail's ports in memory: the stored messages (`domain.ports.MailStore`, held to the same
contract as S3: tests/contracts/mail_store.py) and a mailer that keeps what it was asked to send."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hermes_gateway.domain.ports import MessageTooLarge


@dataclass
class InMemoryMailStore:
    objects: dict[str, bytes] = field(default_factory=dict)
    fail_with: Exception | None = None  # raised by every call (a throttled bucket)
    reads: list[tuple[str, int, int]] = field(default_factory=list)  # (key, start, end) of each ranged read

    def read(self, key: str, limit: int) -> bytes | None:
        self._fail()
        data = self.objects.get(key)
        if data is not None and len(data) > limit:
            raise MessageTooLarge(len(data), limit)
        return data

    def read_range(self, key: str, start: int, end: int) -> bytes | None:
        self._fail()
        self.reads.append((key, start, end))
        data = self.objects.get(key)
        return None if data is None else data[start:end]

    def delete(self, key: str) -> None:
        self._fail()
        self.objects.pop(key, None)

    def _fail(self) -> None:
        if self.fail_with is not None:
            raise self.fail_with


@dataclass
class RecordingMailer:
    """`platforms.email.Mailer`: each message it was given, answered with an id (or `fail_with`)."""

    sent: list[dict[str, Any]] = field(default_factory=list)
    fail_with: Exception | None = None
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    def send(self, *, sender: str, to: str, raw: bytes, tags: Mapping[str, str], configuration_set: str | None) -> str:
        if self.fail_with is not None:
            raise self.fail_with
        message_id = f"ses-{next(self._ids):04d}"
        self.sent.append(
            {"sender": sender, "to": to, "raw": raw, "tags": dict(tags), "configuration_set": configuration_set,
             "message_id": message_id}
        )  # fmt: skip
        return message_id
