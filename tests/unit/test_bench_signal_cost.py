"""bench/signal_cost.py: the messages it posts are the fixtures' signal-cli notifications, which
the Signal adapter reads as messages of a few conversations; run_all merges its keys."""

from __future__ import annotations

from bench.run_all import signal_cost_keys
from bench.signal_cost import notification
from hermes_gateway.domain.session_key import build_session_key
from hermes_gateway.domain.source import InboundMessage
from hermes_gateway.platforms.signal import normalize, receive_params


def test_its_messages_are_signal_messages_of_four_people_in_dms_and_a_group() -> None:
    keys = set()
    for n in range(16):
        params = receive_params(notification(n))
        message = normalize(
            params["envelope"], str(params["account"]), {}, received_at=params["envelope"]["timestamp"] / 1000
        )
        assert isinstance(message, InboundMessage)
        keys.add(build_session_key(message.source))
    assert len(keys) == 4  # each conversation goes on in its own session, as message_cost's do
    assert {key.split(":")[3] for key in keys} == {"dm", "group"}


def test_run_all_merges_the_message_and_the_idle_month() -> None:
    report = {
        "usd_per_million_messages": 15.0,
        "usd_per_million_messages_function_url": 11.5,
        "webhook_requests_per_message": {"message": 1.0, "outbox": 2.0},
        "empty_polls": {"http_api": {"usd_per_month_at_30_s": 0.13}, "function_url": {"usd_per_month_at_30_s": 0.03}},
    }
    assert signal_cost_keys(report) == {
        "signal_usd_per_million_messages": {"http_api": 15.0, "function_url": 11.5},
        "signal_mailbox_calls_per_message": 2.0,
        "signal_idle_usd_per_month": {"http_api": 0.13, "function_url": 0.03},
    }
