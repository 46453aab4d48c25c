"""Honcho memory (https://honcho.dev) over its HTTP API (v3), enabled by `memory.external: honcho`.

Honcho keeps a model of each user (a "peer") from the conversations it is given. Mapping:
- workspace: `memory.honcho_workspace`;
- the user: peer `<profile>-user-<user hash>` (never the raw platform id);
- the agent: peer `hermes-<profile>`;
- the gateway session: the Honcho session of the same id.

`prefetch` reads the user's peer card (a short list of facts); `sync_turn` adds the exchange to
the session (creating workspace and session on first use); the `honcho_ask` tool asks Honcho a
question about the user. A repeated `sync_turn` (a retried task) adds the exchange again, which
Honcho tolerates; nothing is lost. Requests are short (HONCHO_TIMEOUT_SECONDS) and not retried:
memory is an extra, and the manager turns any failure into "unavailable" for this turn.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from typing import Any

from hermes_gateway import http_pool
from hermes_gateway.errors import ConfigError, PermanentError, TransientError
from hermes_gateway.providers.base import ChatMessage, ToolSpec
from hermes_gateway.tools.base import ToolContext, ToolError

HONCHO_TIMEOUT_SECONDS = 8.0
MAX_MESSAGE_CHARS = 20_000
MAX_CARD_FACTS = 40
_SAFE_ID = re.compile(r"[^A-Za-z0-9_-]")

HONCHO_TOOL_SPECS = [
    ToolSpec(
        name="honcho_ask",
        description=(
            "Ask the long-term user model (Honcho) a question about the user in natural language, "
            "e.g. 'What does the user prefer for breakfast?'. It knows what the user said in past sessions."
        ),
        parameters={
            "type": "object",
            "properties": {"question": {"type": "string", "minLength": 2, "maxLength": 1000}},
            "required": ["question"],
            "additionalProperties": False,
        },
    ),
]

# Workspaces and sessions already made by this process: a warm function skips those requests.
_ensured: set[tuple[str, ...]] = set()


def _safe(value: str) -> str:
    return _SAFE_ID.sub("-", value)[:100]


def _user_peer(ctx: ToolContext) -> str | None:
    return _safe(f"{ctx.profile}-user-{ctx.user_hash}") if ctx.user_hash else None


class HonchoMemory:
    name = "honcho"

    def __init__(self, base_url: str, workspace: str, api_key: str | None, timeout: float = HONCHO_TIMEOUT_SECONDS):
        if not base_url.startswith(("https://", "http://")):
            raise ConfigError("the Honcho base URL must be an http(s) URL")
        self._base = base_url.rstrip("/") + "/v3/workspaces"
        self._workspace = workspace
        self._api_key = api_key or None
        self._timeout = timeout
        self._session: str | None = None
        self._user: str | None = None
        self._agent = "hermes"

    def __repr__(self) -> str:
        return f"HonchoMemory({self._base!r}, workspace={self._workspace!r})"

    def initialize(self, session_id: str, ctx: ToolContext) -> None:
        self._session = _safe(session_id)
        self._agent = _safe(f"hermes-{ctx.profile}")
        self._user = _user_peer(ctx)

    def prefetch(self, query: str) -> str:
        if self._user is None:
            return ""
        card = self._request("GET", f"/peers/{self._user}/card", missing_ok=True)
        facts = card.get("peer_card") if isinstance(card, dict) else None
        if not isinstance(facts, list) or not facts:
            return ""
        lines = ["What the long-term user model (Honcho) knows about this user:"]
        lines += [f"- {str(fact)[:300]}" for fact in facts[:MAX_CARD_FACTS]]
        return "\n".join(lines)

    def sync_turn(self, user: str, assistant: str) -> None:
        if self._user is None or self._session is None:
            return
        self._ensure_session()
        messages = [
            {"peer_id": peer, "content": text[:MAX_MESSAGE_CHARS]}
            for peer, text in ((self._user, user), (self._agent, assistant))
            if text.strip()
        ]
        if messages:
            self._request("POST", f"/sessions/{self._session}/messages", {"messages": messages})

    def tools(self) -> list[ToolSpec]:
        return list(HONCHO_TOOL_SPECS)

    def handle_tool(self, name: str, arguments: dict[str, Any], ctx: ToolContext) -> str:
        if name != "honcho_ask":
            raise ToolError(f"Honcho has no tool {name!r}")
        user = _user_peer(ctx)
        if user is None:
            raise ToolError("there is no known user in this turn")
        try:
            answer = self._request("POST", f"/peers/{user}/chat", {"query": str(arguments["question"])})
        except (TransientError, PermanentError) as exc:
            raise ToolError(f"Honcho is unavailable ({exc})") from None
        content = answer.get("content") if isinstance(answer, dict) else None
        return str(content) if content else "Honcho knows nothing about that yet."

    def on_session_end(self, transcript: list[ChatMessage]) -> None:
        """Nothing left to send: every exchange was synced as its turn ended."""

    def _ensure_session(self) -> None:
        assert self._session is not None and self._user is not None
        key = (self._base, self._workspace, self._session)
        if key in _ensured:
            return
        # get-or-create: the workspace, then the session with both peers (which creates them)
        self._request("POST", "", {"id": self._workspace}, workspace_path=False)
        self._request("POST", "/sessions", {"id": self._session, "peers": {self._user: {}, self._agent: {}}})
        _ensured.add(key)

    def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        missing_ok: bool = False,
        workspace_path: bool = True,
    ) -> Any:
        url = f"{self._base}/{urllib.parse.quote(self._workspace)}{path}" if workspace_path else self._base
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            headers["Content-Type"] = "application/json"
            data = json.dumps(body).encode("utf-8")
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        try:
            reply = http_pool.send(method, url, body=data, headers=headers, timeout=self._timeout)
        except http_pool.NoAnswer as exc:
            raise exc.transient("honcho") from None
        except http_pool.Unsendable:
            raise PermanentError("honcho: the base URL or the API key is not usable in a request") from None
        if not 200 <= reply.status < 300:
            if reply.status == 404 and missing_ok:
                return None
            if reply.status == 429 or reply.status >= 500:
                raise TransientError(f"honcho: HTTP {reply.status}")
            raise PermanentError(f"honcho: HTTP {reply.status}")
        raw = reply.body
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            raise PermanentError("honcho: the response is not JSON") from None
