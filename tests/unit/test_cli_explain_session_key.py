"""`hermes-gateway session-key` and `explain`: the key of a source, and why a payload lands where it does."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from hermes_cli import build_parser
from hermes_cli import main as cli


@pytest.fixture(autouse=True)
def settings_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Defaults, from a file the test owns (never the runner's own gateway.yaml or environment)."""
    for name in ("GATEWAY_PROFILE", "GATEWAY_ALLOW_ALL_USERS", "GATEWAY_ALLOWED_USERS", "TELEGRAM_ALLOWED_USERS"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "gateway.yaml"
    path.write_text("stage: test\n")
    monkeypatch.setenv("GATEWAY_CONFIG", str(path))
    return path


def run(argv: list[str], capsys: pytest.CaptureFixture[str], stdin: str | None = None) -> tuple[int, str, str]:
    import sys

    saved = sys.stdin
    if stdin is not None:
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode()))
    try:
        code = cli(argv)
    finally:
        sys.stdin = saved
    out = capsys.readouterr()
    return code, out.out, out.err


def write(tmp_path: Path, name: str, data: Any) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.parametrize(
    ("source", "flags", "key"),
    [
        ({"platform": "telegram", "chat_id": "99"}, [], "agent:main:telegram:dm:99"),
        (
            {"platform": "telegram", "chat_id": 99, "chat_type": "dm"},
            ["--profile", "coder"],
            "agent:coder:telegram:dm:99",
        ),
        ({"platform": "telegram", "chat_id": "99"}, ["--profile", "main"], "agent:main~:telegram:dm:99"),
        (
            {"platform": "discord", "chat_type": "group", "chat_id": "guild-123", "user_id": "alice"},
            [],
            "agent:main:discord:group:guild-123:alice",
        ),
        (
            {"platform": "discord", "chat_type": "group", "chat_id": "guild-123", "user_id": "alice"},
            ["--group-sessions-per-user", "false"],
            "agent:main:discord:group:guild-123",
        ),
        (
            {"platform": "telegram", "chat_type": "group", "chat_id": "-1001", "thread_id": "17585", "user_id": "42"},
            ["--thread-sessions-per-user", "true"],
            "agent:main:telegram:group:-1001:17585:42",
        ),
        (
            {"platform": "slack", "chat_type": "group", "chat_id": "C123", "scope_id": "T1", "user_id": "U1"},
            [],
            "agent:main:slack:group:T1:C123:U1",
        ),
    ],
)
def test_session_key_prints_only_the_key(
    source: dict[str, Any], flags: list[str], key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(["session-key", "--source", write(tmp_path, "s.json", source), *flags], capsys)
    assert code == 0 and out == key + "\n"


def test_session_key_reads_standard_input_and_refuses_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["session-key", "--source", "-"], capsys, stdin='{"platform": "telegram", "chat_id": "7"}')[1] == (
        "agent:main:telegram:dm:7\n"
    )
    code, _, err = run(["session-key", "--source", "-"], capsys, stdin="not json")
    assert code == 2 and "JSON object" in err
    code, _, err = run(["session-key", "--source", write(tmp_path, "b.json", {"chat_id": "1"})], capsys)
    assert code == 2 and "platform" in err
    code, _, err = run(
        ["session-key", "--source", write(tmp_path, "c.json", {"platform": "x", "chat_type": "room"})], capsys
    )
    assert code == 2 and "chat_type" in err
    code, _, err = run(
        ["session-key", "--source", write(tmp_path, "d.json", {"platform": "t", "chat_id": "/../x"})], capsys
    )
    assert code == 2 and "unsafe session key" in err
    with pytest.raises(SystemExit):
        build_parser().parse_args(["session-key", "--source", "-", "--group-sessions-per-user", "maybe"])


def telegram_update(text: str = "hello", user_id: int = 42) -> dict[str, Any]:
    return {
        "update_id": 7,
        "message": {
            "message_id": 7,
            "date": 1,
            "chat": {"id": 99, "type": "private", "first_name": "Al"},
            "from": {"id": user_id, "is_bot": False, "first_name": "Al"},
            "text": text,
        },
    }


def test_explain_normalizes_keys_and_authorizes_without_a_deployment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], settings_file: Path
) -> None:
    payload = write(tmp_path, "u.json", telegram_update())
    # Given default settings (no allowlist), the sender is not allowed
    code, out, _ = run(["explain", "--platform", "telegram", "--payload", payload], capsys)
    explained = json.loads(out)
    assert code == 0
    assert explained["source"]["platform"] == "telegram" and explained["source"]["user_id"] == "42"
    assert explained["session_key"] == "agent:main:telegram:dm:99"
    assert explained["authorized"] is False and explained["reason"]
    assert explained["session"]["status"] == "unknown"
    # When the user is allowlisted, the same payload is authorized, with the rule that allowed it
    settings_file.write_text("stage: test\nplatforms:\n  telegram:\n    allowed_users: ['42']\n")
    explained = json.loads(run(["explain", "--platform", "telegram", "--payload", payload], capsys)[1])
    assert explained["authorized"] is True and "allow" in explained["reason"]


def test_explain_as_a_named_profile_uses_its_namespace_and_its_allowlist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], settings_file: Path
) -> None:
    payload = write(tmp_path, "u.json", telegram_update())
    settings_file.write_text(
        "stage: test\nplatforms:\n  telegram:\n    allowed_users: ['42']\n"
        "profiles:\n  coder:\n    platforms:\n      telegram: {enabled: true, allowed_users: ['7']}\n"
    )
    explained = json.loads(
        run(["explain", "--platform", "telegram", "--payload", payload, "--profile", "coder"], capsys)[1]
    )
    assert explained["session_key"] == "agent:coder:telegram:dm:99"
    assert explained["source"]["profile"] == "coder"
    assert explained["authorized"] is False  # the deployment's bot allows 42; the coder bot does not
    code, _, err = run(["explain", "--platform", "telegram", "--payload", payload, "--profile", "writer"], capsys)
    assert code == 2 and "not served" in err


def test_explain_refuses_unknown_platforms_and_malformed_payloads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(["explain", "--platform", "myspace", "--payload", write(tmp_path, "a.json", {})], capsys)
    assert code == 2 and "unknown platform" in err
    code, _, err = run(["explain", "--platform", "telegram", "--payload", write(tmp_path, "b.json", [1])], capsys)
    assert code == 2 and "refused the payload" in err
    code, out, _ = run(["explain", "--platform", "telegram", "--payload", "-"], capsys, stdin='{"update_id": 1}')
    assert code == 0 and json.loads(out)["messages"] == []
    code, _, err = run(["explain", "--platform", "telegram", "--payload", str(tmp_path / "missing.json")], capsys)
    assert code == 2 and "cannot read" in err


@pytest.mark.parametrize("command", ["sessions", "explain", "session-key"])
def test_every_new_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args([command, "--help"])
    text = capsys.readouterr().out
    assert done.value.code == 0 and "usage:" in text
    if command == "explain":
        assert "NOT checked" in " ".join(text.split())


def test_explain_reads_a_raw_e_mail_as_its_payload(capsys: pytest.CaptureFixture[str], settings_file: Path) -> None:
    # an .eml file is e-mail's payload (SES delivers no webhook body; no verdict is checked here)
    from hermes_gateway.platforms.email_inbound import thread_id_of

    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "email"
    settings_file.write_text(
        "stage: test\nplatforms:\n  email:\n    enabled: true\n    address: alex.personal@example.net\n"
        "    allowed_users: ['*@example.com']\n"
    )
    code, out, _ = run(
        ["explain", "--platform", "email", "--payload", str(fixtures / "03_reply_in_reply_to_references.eml")], capsys
    )
    explained = json.loads(out)
    root = thread_id_of("<CABzQGhkMXDxUt_tSVQcg=43aniUhtsVfCZVzu-PG0kwS_uzqMw@mail.gmail.com>")
    assert code == 0 and explained["session_key"] == f"agent:main:email:dm:alex@example.com:{root}"
    assert explained["authorized"] is True and explained["reason"] == "platform_allowlist"


BLUEBUBBLES = Path(__file__).resolve().parents[1] / "fixtures" / "bluebubbles"


def bluebubbles_now(tmp_path: Path, name: str) -> str:
    """The server's payload as it is, sent now (explain reads it as ingress would at this moment)."""
    event = json.loads((BLUEBUBBLES / f"{name}.json").read_text())
    event["data"]["dateCreated"] = int(__import__("time").time() * 1000)
    return write(tmp_path, f"{name}.json", event)


@pytest.mark.parametrize(
    ("name", "key", "user"),
    [
        ("new_message_dm_text", "agent:main:bluebubbles:dm:+15555550123", "+15555550123"),
        ("new_message_dm_text_macos26_any_guid", "agent:main:bluebubbles:dm:+15555550123", "+15555550123"),
        ("new_message_group_text", "agent:main:bluebubbles:group:chat512345678901234567:+15555550124", "+15555550124"),
        ("new_message_attachment_image", "agent:main:bluebubbles:dm:+15555550123", "+15555550123"),
    ],
)
def test_explain_reads_bluebubbles_payloads_as_the_server_sends_them(
    name: str, key: str, user: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], settings_file: Path
) -> None:
    allowed = "platforms:\n  bluebubbles: {enabled: true, allowed_users: ['+15555550123']}\n"
    settings_file.write_text("stage: test\n" + allowed)
    code, out, _ = run(["explain", "--platform", "bluebubbles", "--payload", bluebubbles_now(tmp_path, name)], capsys)
    explained = json.loads(out)
    assert code == 0
    assert explained["session_key"] == key and explained["source"]["user_id"] == user
    assert explained["event_id"].startswith("bluebubbles:")
    # the allowlist names the DM's sender; the group's other member is not on it
    assert explained["authorized"] is (user == "+15555550123")


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("new_message_from_me_echo", "own_message"),
        ("new_message_tapback_love", "reaction"),
        ("updated_message_edited", "edited"),
        ("typing_indicator_started", "typing"),
        ("new_message_dm_text", "outlived_deduplication"),  # as it is: sent in July 2025
    ],
)
def test_explain_says_why_a_bluebubbles_event_is_no_message(
    name: str, reason: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(["explain", "--platform", "bluebubbles", "--payload", str(BLUEBUBBLES / f"{name}.json")], capsys)
    assert code == 0
    assert json.loads(out) == {
        "messages": [],
        "why": "the payload carries no message (a handshake or an ignored event)",
        "ignored": [reason],
    }


def test_explain_reads_a_signal_cli_notification_and_its_allowlist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], settings_file: Path
) -> None:
    import time

    from tests.fakes.signal_cli import fixture

    # Given signal-cli's receive notification of a DM (sent now), as the forwarder posts it
    notification = fixture("receive_dm_text.json")
    now = int(time.time() * 1000)
    notification["params"]["envelope"]["timestamp"] = notification["params"]["envelope"]["dataMessage"]["timestamp"] = (
        now
    )
    payload = write(tmp_path, "signal.json", notification)
    settings_file.write_text("stage: test\nplatforms:\n  signal: {enabled: true, allowed_users: ['+15555550123']}\n")

    explained = json.loads(run(["explain", "--platform", "signal", "--payload", payload], capsys)[1])

    assert explained["session_key"] == "agent:main:signal:dm:+15555550123"
    assert explained["source"]["user_id_alt"] == "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"
    assert (explained["authorized"], explained["reason"]) == (True, "platform_allowlist")
    assert explained["event_id"] == f"signal:a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d:{now}"
    # a typing notification carries no message
    typing = write(tmp_path, "typing.json", fixture("receive_typing_started.json"))
    assert json.loads(run(["explain", "--platform", "signal", "--payload", typing], capsys)[1])["messages"] == []
