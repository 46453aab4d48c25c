"""The `session_search` tool: search this profile's past transcripts.

It reads through the session store's bounded `search` (the profile's newest sessions, never a
scan of the table); another profile's sessions never appear.
"""

from __future__ import annotations

import time
from typing import Any

from hermes_gateway.domain.session_key import key_namespace
from hermes_gateway.domain.sessions import profile_of_key
from hermes_gateway.providers.base import ToolSpec
from hermes_gateway.tools.base import SpecTool, ToolContext, ToolError, result_text

MAX_HITS = 20

SESSION_SEARCH_SPEC = ToolSpec(
    name="session_search",
    description=(
        "Search past conversations (this and earlier sessions) for words or a phrase, case-insensitive. "
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
    # a cron turn has no session of its own; it searches its profile's sessions all the same
    namespace = profile_of_key(ctx.session_key) if ctx.session_key else key_namespace(ctx.profile)
    limit = int(arguments.get("limit") or 10)
    hits = ctx.require("sessions").search(namespace, query, limit=limit)
    return result_text(
        {
            "query": query,
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


SESSION_SEARCH = SpecTool(SESSION_SEARCH_SPEC, session_search)
