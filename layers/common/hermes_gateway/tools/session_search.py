"""The `session_search` tool: search the past transcripts the turn may reach.

It reads through the session store's bounded `search` (the newest sessions of the turn's reach:
the user's in a DM, the group's in a group, the profile's for admins or when the operator says so;
BEHAVIOUR §11), never a scan of the table; another profile's sessions never appear, and no other
user's.
"""

from __future__ import annotations

import time
from typing import Any

from hermes_gateway.domain.reach import SearchScope
from hermes_gateway.domain.session_key import key_namespace
from hermes_gateway.domain.sessions import profile_of_key
from hermes_gateway.providers.base import ToolSpec
from hermes_gateway.tools.base import SpecTool, ToolContext, ToolError, result_text

MAX_HITS = 20

SESSION_SEARCH_SPEC = ToolSpec(
    name="session_search",
    description=(
        "Search past conversations with this user (in a group: this group's) for words or a phrase, "
        "case-insensitive. "
        "Use it when the user refers to something discussed before, or a continuity note names a "
        "previous session. Returns snippets with their session id and date, newest first."
    ),
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 2, "maxLength": 200},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_HITS},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
)


def session_search(arguments: dict[str, Any], ctx: ToolContext) -> str:
    query = " ".join(str(arguments["query"]).split())
    if len(query) < 2:
        raise ToolError("the query needs at least 2 characters")
    scope = ctx.reach.search if ctx.reach is not None else _own_only(ctx)
    limit = int(arguments.get("limit") or 10)
    hits = ctx.require("sessions").search(scope.namespace, query, limit=limit, scope=scope)
    return result_text(
        {
            "query": query,
            "searched": _SEARCHED[scope.label],
            "hits": [
                {
                    "session_id": hit.session_id,
                    "this_session": hit.session_id == ctx.session_id,
                    "title": hit.title,
                    "role": hit.role,
                    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(hit.created_at)),
                    "snippet": hit.snippet,
                }
                for hit in hits[:limit]
            ],
        }
    )


_SEARCHED = {
    "chat": "this chat's sessions",
    "user": "this user's sessions (in a group: the group's)",
    "profile": "every session of this agent",
}


def _own_only(ctx: ToolContext) -> SearchScope:
    """A turn whose reach is unknown searches its own session's key at most."""
    namespace = profile_of_key(ctx.session_key) if ctx.session_key else key_namespace(ctx.profile)
    return SearchScope(namespace, session_key=ctx.session_key or f"{namespace}:-")


SESSION_SEARCH = SpecTool(SESSION_SEARCH_SPEC, session_search)
