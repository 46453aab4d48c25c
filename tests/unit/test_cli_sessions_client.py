"""`hermes-gateway sessions`: how requests reach the session API (SigV4 deployed, token local)."""

from __future__ import annotations

import argparse
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from hermes_cli import main as cli
from hermes_cli.sessions import SessionApiClient, client_for, profile_url, region_of
from hermes_gateway.errors import ConfigError

ACCESS_KEY_ID = "TESTACCESSKEYID00000"  # any id signs; not shaped like a real one


def test_region_of_an_execute_api_url() -> None:
    assert region_of("https://abc123.execute-api.eu-west-1.amazonaws.com/api/sessions") == "eu-west-1"
    assert region_of("http://127.0.0.1:8080/api/sessions") is None


def test_a_named_profiles_sessions_are_at_its_own_route() -> None:
    # Each profile's route is granted on its own; the body never picks the profile
    deployed = "https://abc123.execute-api.eu-west-1.amazonaws.com/api/sessions"
    assert profile_url(deployed, "coder") == "https://abc123.execute-api.eu-west-1.amazonaws.com/p/coder/api/sessions"
    assert profile_url("http://127.0.0.1:8080/api/sessions/", "my_bot") == "http://127.0.0.1:8080/p/my_bot/api/sessions"


def test_deployed_requests_are_sigv4_signed_for_execute_api(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    client = SessionApiClient("https://abc123.execute-api.eu-west-1.amazonaws.com/api/sessions")
    headers = client._signed(b'{"verb": "session.list"}', {"content-type": "application/json"})
    authorization = headers["Authorization"]
    assert authorization.startswith(f"AWS4-HMAC-SHA256 Credential={ACCESS_KEY_ID}/")
    assert "/eu-west-1/execute-api/aws4_request" in authorization
    assert "X-Amz-Date" in headers and "secret" not in json.dumps(headers)


class _Api(BaseHTTPRequestHandler):
    seen: list[tuple[dict[str, str], Any]] = []

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        _Api.seen.append(({k.lower(): v for k, v in self.headers.items()}, body))
        if self.headers.get("authorization") != "Bearer tok":
            status, answer = 403, {"ok": False, "error": {"reason": "permission_denied", "message": "no"}}
        elif body["verb"] == "session.resume":
            status, answer = 200, {"ok": True, "session": {"revision": 4, "execution_generation": 2}}
        elif body["verb"] == "session.mutate":
            status, answer = 409, {"ok": False, "error": {"reason": "conflict", "message": "stale"}}
        else:
            status, answer = 200, {"ok": True, "sessions": [], "next_before": None}
        raw = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("content-length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


@pytest.fixture
def local_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/api/sessions"
    state = tmp_path / "local.json"
    state.write_text(json.dumps({"session_api": {"url": url, "token": "tok"}}))
    monkeypatch.setenv("HERMES_LOCAL_STATE", str(state))
    _Api.seen.clear()
    yield url
    server.shutdown()
    server.server_close()


def test_local_requests_carry_the_token_and_mutations_carry_the_fences_read(
    local_api: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(["sessions", "list", "--local"]) == 0
    assert capsys.readouterr().out.strip() == "no sessions"
    # A mutation reads the fences first, then sends them with a fresh request id
    assert cli(["sessions", "delete", "20261129_000000_aaaaaaaa", "--local", "--json"]) == 1
    out = capsys.readouterr()
    assert json.loads(out.out)["error"]["reason"] == "conflict" and "error: conflict" in out.err
    sent = [body for _, body in _Api.seen]
    assert sent[1]["verb"] == "session.resume"
    mutation = sent[2]
    assert (mutation["op"], mutation["revision"], mutation["execution_generation"]) == ("delete", 4, 2)
    assert mutation["request_id"].startswith("cli-")
    assert all(headers["authorization"] == "Bearer tok" for headers, _ in _Api.seen)
    # --request-id and explicit fences skip the read (a retry of an earlier call)
    _Api.seen.clear()
    cli(["sessions", "rename", "s1", "T", "--revision", "9", "--request-id", "again", "--local"])
    capsys.readouterr()
    assert [b["verb"] for _, b in _Api.seen] == ["session.mutate"]
    assert _Api.seen[0][1]["request_id"] == "again" and "execution_generation" not in _Api.seen[0][1]


def test_without_local_mode_or_a_deployed_url_the_cli_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERMES_LOCAL_STATE", str(tmp_path / "missing.json"))
    with pytest.raises(ConfigError, match="no running local mode"):
        client_for(argparse.Namespace(local=True, stage=None))
    monkeypatch.setattr("hermes_cli.sessions.stack_outputs", lambda stage: {})
    with pytest.raises(ConfigError, match="SessionApiUrl"):
        client_for(argparse.Namespace(local=False, stage="dev"))
    monkeypatch.setattr("hermes_cli.sessions.stack_outputs", lambda stage: {"SessionApiUrl": "https://x/api"})
    assert client_for(argparse.Namespace(local=False, stage="dev")) == SessionApiClient("https://x/api")
