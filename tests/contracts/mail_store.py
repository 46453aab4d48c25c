"""The stored e-mail's contract (`domain.ports.MailStore`), run against the in-memory fake
(tests/unit/test_mail_store.py) and S3 on moto (tests/integration/test_email_on_moto.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from hermes_gateway.domain.ports import MailStore, MessageTooLarge

# (a store, and a function that stores an object in it as SES's S3 action would)
Make = Callable[[], tuple[MailStore, Callable[[str, bytes], None]]]
KEY = "email/inbound/abc123"
MESSAGE = b"From: a@example.com\r\nTo: b@example.com\r\nSubject: hi\r\n\r\nhello there\r\n"


def check_a_message_is_read_whole_within_its_bound(make: Make) -> None:
    store, put = make()
    put(KEY, MESSAGE)
    assert store.read(KEY, len(MESSAGE)) == MESSAGE
    with pytest.raises(MessageTooLarge) as refused:
        store.read(KEY, len(MESSAGE) - 1)
    assert refused.value.size == len(MESSAGE)


def check_a_range_is_the_bytes_between_its_ends(make: Make) -> None:
    store, put = make()
    put(KEY, MESSAGE)
    start = MESSAGE.index(b"hello")
    assert store.read_range(KEY, start, start + 5) == b"hello"
    assert store.read_range(KEY, start, start) == b""


def check_a_missing_message_is_none_and_a_deleted_one_is_gone(make: Make) -> None:
    store, put = make()
    assert store.read(KEY, 1000) is None
    assert store.read_range(KEY, 0, 5) is None
    put(KEY, MESSAGE)
    store.delete(KEY)
    assert store.read(KEY, 1000) is None
    store.delete(KEY)  # deleting what is gone is no error


CHECKS = [
    check_a_message_is_read_whole_within_its_bound,
    check_a_range_is_the_bytes_between_its_ends,
    check_a_missing_message_is_none_and_a_deleted_one_is_gone,
]
