"""bench/chat_extras_cost.py's keys in results/latest.json (the bench itself runs on moto, in make bench)."""

from __future__ import annotations


def test_run_all_keeps_each_extra_per_million_of_what_it_happens_on() -> None:
    from bench.run_all import chat_extras_keys

    extras = {
        "heard_at": {"usd_per_million_whatsapp_messages": 0.0},
        "window_check": {"usd_per_million_pushes": 0.125},
        "voice_command": {"write_usd_per_million_commands": 0.625},
        "quote_lookup": {"usd_per_million_quoted_replies": 0.1875},
    }
    assert chat_extras_keys(extras) == {
        "chat_extras_usd_per_million": {
            "heard_at_per_whatsapp_message": 0.0,
            "window_check_per_whatsapp_push": 0.125,
            "voice_command_write": 0.625,
            "quote_lookup_per_id_only_reply": 0.1875,
        }
    }
