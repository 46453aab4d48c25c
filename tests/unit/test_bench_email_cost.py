"""bench/email_cost.py: SES's own side priced from the messages' sizes, and the messages it sends
are what the gateway reads as one thread per person (a new subject, then replies in it)."""

from __future__ import annotations

import pytest

from bench.email_cost import ADDRESS, message, ses_side
from hermes_gateway.domain.source import InboundMessage
from hermes_gateway.platforms.email_inbound import Receipt, parse_message


def test_ses_is_priced_per_message_and_per_256_kb_chunk_received() -> None:
    # as recorded: 0.10 USD per 1,000 received, 0.09 per 1,000 chunks, 0.10 per 1,000 sent
    small = ses_side(2, [1_400, 1_400], 0.0)
    assert small == {"ses_receiving": pytest.approx(190.0), "s3_put_by_ses": pytest.approx(5.0),
                     "ses_sending": pytest.approx(100.0)}  # fmt: skip
    large = ses_side(1, [300 * 1024], 0.0)  # two chunks
    assert large["ses_receiving"] == pytest.approx(280.0)
    assert ses_side(1, [1_000], 1024**3)["ses_sending"] == pytest.approx(100.0 + 120_000.0)


@pytest.mark.parametrize("kind", ["email", "email_attachment"])
def test_a_bench_thread_is_one_session_of_its_person(kind: str) -> None:
    receipt = Receipt("x", "person7@example.org", {"dmarc": "PASS", "spf": "PASS"})
    read = [
        parse_message(message(kind, 7, n), address=ADDRESS, received_at=0, object_key="k", receipt=receipt)
        for n in range(3)
    ]
    assert all(isinstance(m, InboundMessage) for m in read)
    threads = {m.source.thread_id for m in read if isinstance(m, InboundMessage)}
    assert len(threads) == 1
    first = read[0]
    assert isinstance(first, InboundMessage) and first.source.chat_id == "person7@example.org"
    assert len(first.attachments) == (1 if kind == "email_attachment" else 0)
