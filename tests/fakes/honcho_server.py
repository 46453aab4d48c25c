"""A fake Honcho (v3 HTTP API) on a loopback port: the few endpoints the Honcho memory uses.

- POST /v3/workspaces                                  get or create a workspace ({"id"})
- POST /v3/workspaces/{ws}/sessions                    get or create a session ({"id", "peers"})
- POST /v3/workspaces/{ws}/sessions/{sid}/messages     add messages ({"messages": [{peer_id, content}]})
- GET  /v3/workspaces/{ws}/peers/{peer}/card           the peer card ({"peer_card": [...]}); 404 for an unknown peer
- POST /v3/workspaces/{ws}/peers/{peer}/chat           an answer ({"content"}) from `chat_answers`, else
                                                       one made from what the peer said

Requests to a workspace or session that does not exist get 404, as Honcho answers. Scripted
raw answers (`answer_next`) go first, so tests can make it fail. Register with
`pytest_plugins = ("tests.fakes.honcho_server",)` for the `fake_honcho` fixture.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest

from tests.fakes.loopback import LoopbackFake, ScriptedAnswer

_SESSION_MESSAGES = re.compile(r"^/v3/workspaces/([^/]+)/sessions/([^/]+)/messages$")
_SESSIONS = re.compile(r"^/v3/workspaces/([^/]+)/sessions$")
_PEER = re.compile(r"^/v3/workspaces/([^/]+)/peers/([^/]+)/(card|chat)$")


@dataclass(frozen=True)
class HonchoRequest:
    http_method: str
    path: str
    headers: dict[str, str]
    json: Any


@dataclass
class FakeHoncho(LoopbackFake[HonchoRequest]):
    thread_name: ClassVar[str] = "fake-honcho"
    http_methods: ClassVar[frozenset[str]] = frozenset({"GET", "POST"})

    workspaces: set[str] = field(default_factory=set)
    sessions: dict[tuple[str, str], set[str]] = field(default_factory=dict)  # (ws, session) -> peers
    messages: dict[tuple[str, str], list[dict[str, str]]] = field(default_factory=dict)
    cards: dict[str, list[str]] = field(default_factory=dict)  # peer -> facts
    chat_answers: list[str] = field(default_factory=list)

    def _record(self, http_method: str, path: str, headers: dict[str, str], body: Any) -> HonchoRequest:
        return HonchoRequest(http_method, path, headers, body)

    def said_by(self, peer: str) -> list[str]:
        return [m["content"] for msgs in self.messages.values() for m in msgs if m["peer_id"] == peer]

    def _default_answer(self, request: HonchoRequest) -> ScriptedAnswer:
        path, body = request.path.split("?")[0], request.json
        if request.http_method == "POST" and path == "/v3/workspaces":
            self.workspaces.add(body["id"])
            return ScriptedAnswer(200, {"id": body["id"], "metadata": {}})
        if match := _SESSIONS.match(path):
            return self._session(match.group(1), body)
        if match := _SESSION_MESSAGES.match(path):
            return self._add_messages(match.group(1), match.group(2), body)
        if match := _PEER.match(path):
            return self._peer(match.group(1), match.group(2), match.group(3), request.http_method, body)
        return ScriptedAnswer(404, {"detail": "Not Found"})

    def _session(self, workspace: str, body: Any) -> ScriptedAnswer:
        if workspace not in self.workspaces:
            return ScriptedAnswer(404, {"detail": "Workspace not found"})
        peers = self.sessions.setdefault((workspace, body["id"]), set())
        peers.update((body.get("peers") or {}).keys())
        return ScriptedAnswer(200, {"id": body["id"], "workspace_id": workspace, "is_active": True})

    def _add_messages(self, workspace: str, session: str, body: Any) -> ScriptedAnswer:
        if (workspace, session) not in self.sessions:
            return ScriptedAnswer(404, {"detail": "Session not found"})
        added = [{"peer_id": m["peer_id"], "content": m["content"]} for m in body["messages"]]
        self.messages.setdefault((workspace, session), []).extend(added)
        return ScriptedAnswer(200, [{**m, "session_id": session, "workspace_id": workspace} for m in added])

    def _peer(self, workspace: str, peer: str, what: str, method: str, body: Any) -> ScriptedAnswer:
        known = any(peer in peers for (ws, _), peers in self.sessions.items() if ws == workspace)
        if what == "card" and method == "GET":
            if not known and peer not in self.cards:
                return ScriptedAnswer(404, {"detail": "Peer not found"})
            return ScriptedAnswer(200, {"peer_card": self.cards.get(peer)})
        if what == "chat" and method == "POST":
            if self.chat_answers:
                return ScriptedAnswer(200, {"content": self.chat_answers.pop(0)})
            said = self.said_by(peer)
            return ScriptedAnswer(200, {"content": f"The user said: {said[-1]}" if said else None})
        return ScriptedAnswer(405, {"detail": "Method Not Allowed"})


@pytest.fixture
def fake_honcho() -> Iterator[FakeHoncho]:
    with FakeHoncho() as fake:
        yield fake
