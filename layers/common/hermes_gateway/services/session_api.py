"""The session API (BEHAVIOUR §3): one POST endpoint, `{"verb", "request_id", ...}`.

Verbs: `session.create`, `session.resume` (a snapshot with the fences a later mutation carries),
`session.mutate` (`rename, delete, rewind, reset, branch, model, compress`), `session.detach`,
`session.list`, `session.search`. Sessions are scoped to one profile, the one the route serves:
`/api/sessions` the deployment's own, `/p/<profile>/api/sessions` a named profile's. Each route
is granted on its own in IAM (`execute-api:Invoke` on its ARN), so a caller allowed one profile's
route reaches no other profile's sessions: they are never listed, found or changed, and a body's
`"profile"` naming another profile is `permission_denied`.

Every mutating call carries a `request_id`: its first answer is stored as a receipt (a
conditional put claims the id, `domain.receipts`) and a retry gets that receipt back, changing
nothing twice. A failure a retry may fix (`busy`, `unavailable`) gives the id back instead.

Errors carry only a bounded reason code (`REASONS`) and a message that holds no value from the
request or the store.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from hermes_gateway.domain.events import LifecycleEvents
from hermes_gateway.domain.model_policy import ModelPolicy
from hermes_gateway.domain.ports import SessionStores, TurnStarter
from hermes_gateway.domain.receipts import ReceiptStore
from hermes_gateway.domain.session_key import build_session_key, key_namespace, validate_session_id
from hermes_gateway.domain.sessions import (
    Fence,
    InvalidSessionRequest,
    SessionEntry,
    SessionInfo,
    SessionNotFound,
    profile_of_key,
    sanitize_model_override,
)
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.errors import (
    BadRequest,
    Conflict,
    InvalidIdentifier,
    SessionBusy,
    TransientError,
)
from hermes_gateway.observability import hash_id, logger
from hermes_gateway.services import lifecycle
from hermes_gateway.settings import Settings

# reason code -> HTTP status
REASONS: dict[str, int] = {
    "not_found": 404,
    "permission_denied": 403,
    "conflict": 409,
    "invalid": 400,
    "busy": 423,
    "unavailable": 503,
}
# A retry may succeed: the request id is given back rather than answered for good.
RETRYABLE = frozenset({"busy", "unavailable"})
_GENERIC = {
    "not_found": "no such session in this profile",
    "permission_denied": "not allowed",
    "conflict": "the session changed since it was read (stale revision or execution_generation); read it again",
    "invalid": "invalid request",
    "busy": "a turn is running in this session; try again when it ends",
    "unavailable": "the session store is unavailable; retry with the same request_id",
}
VERBS = (
    "session.create",
    "session.resume",
    "session.mutate",
    "session.detach",
    "session.list",
    "session.search",
)
MUTATING = frozenset({"session.create", "session.mutate", "session.detach"})
OPS = ("rename", "delete", "rewind", "reset", "branch", "model", "compress")
# Every op but rename changes what a running or next turn sees: it also carries the generation.
NEEDS_GENERATION = frozenset(OPS) - {"rename"}
API_PLATFORM = "api"  # the platform of sessions created through the API
_REQUEST_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_END_REASON = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
MAX_LIST = 100
MAX_MESSAGES = 500
MAX_SUMMARY = 20_000
IN_PROGRESS_WAIT_SECONDS = 3.0  # a concurrent retry waits this long for the first call's receipt


class ApiError(Exception):
    """A refusal with a bounded reason code. `message` never holds a value from the request."""

    def __init__(self, reason: str, message: str | None = None) -> None:
        if reason not in REASONS:
            raise ValueError(f"unknown reason code {reason!r}")
        super().__init__(message or _GENERIC[reason])
        self.reason = reason
        self.message = message or _GENERIC[reason]


@dataclass(frozen=True)
class ApiResponse:
    status: int
    body: dict[str, Any]
    replayed: bool = False  # the stored receipt of an earlier call with the same request_id

    @classmethod
    def error(cls, exc: ApiError) -> ApiResponse:
        return cls(REASONS[exc.reason], {"ok": False, "error": {"reason": exc.reason, "message": exc.message}})


@dataclass(frozen=True)
class SessionApiDeps:
    settings: Settings
    stores: SessionStores
    receipts: ReceiptStore
    events: LifecycleEvents
    now: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    in_progress_wait: float = IN_PROGRESS_WAIT_SECONDS
    caller: str = field(default="unknown")  # who signed the request (hashed in logs)
    # Starts the memory flush of a session a `reset` replaced (None: no flush, e.g. in tests).
    starter: TurnStarter | None = None
    # What a `model` op may choose: the route's profile's, from the deployment's settings (None:
    # from `settings`, as the deployment's own profile).
    models: ModelPolicy | None = None


def handle_request(body: Any, deps: SessionApiDeps, route_profile: str | None = None) -> ApiResponse:
    """Answer one request body (already parsed JSON) on the route of `route_profile` (None: the
    deployment's own). Never raises for bad input or a store refusal."""
    try:
        verb, request_id = _envelope(body)
        deps = _for_profile(body, deps, route_profile)
    except ApiError as exc:
        return ApiResponse.error(exc)
    extra = {"verb": verb, "caller": hash_id(deps.caller)}
    if verb not in MUTATING:
        response = _answer(verb, body, deps)
    else:
        assert request_id is not None  # _envelope requires it for a mutating verb
        response = _once(verb, request_id, body, deps)
    reason = response.body.get("error", {}).get("reason") if not response.body.get("ok") else None
    logger.info("session api call", extra={**extra, "status": response.status, "reason": reason})
    return response


def _for_profile(body: dict[str, Any], deps: SessionApiDeps, route_profile: str | None) -> SessionApiDeps:
    """The deps of the profile the route serves. The body may name that profile (`"profile"`),
    never another: the caller was allowed this route only."""
    from dataclasses import replace

    from hermes_gateway.errors import UnknownProfile

    try:
        chosen = deps.settings.for_profile(route_profile)
    except UnknownProfile:
        raise ApiError("not_found", "no such profile in this deployment") from None
    named = body.get("profile")
    if named is not None and not isinstance(named, str):
        raise ApiError("invalid", "profile must be a profile name")
    if named is not None and named != chosen.profile:
        raise ApiError(
            "permission_denied",
            "this route serves one profile's sessions; a named profile's are at /p/<profile>/api/sessions",
        )
    if chosen is deps.settings:
        return deps
    return replace(deps, settings=chosen, models=ModelPolicy.of(deps.settings, route_profile))


_PROFILE_ROUTE = re.compile(r"^/p/([^/]+)/api/sessions/?$")


def route_profile(raw_path: str) -> str | None:
    """The named profile a session API path serves (`/p/<profile>/api/sessions`), None for the
    deployment's own (`/api/sessions`)."""
    found = _PROFILE_ROUTE.match(raw_path)
    return found.group(1) if found else None


def _envelope(body: Any) -> tuple[str, str | None]:
    if not isinstance(body, dict):
        raise ApiError("invalid", "the body must be a JSON object with a verb")
    verb = body.get("verb")
    if verb not in VERBS:
        raise ApiError("invalid", f"verb must be one of {', '.join(VERBS)}")
    request_id = body.get("request_id")
    if request_id is None and verb not in MUTATING:
        return verb, None
    if not isinstance(request_id, str) or not _REQUEST_ID.match(request_id):
        raise ApiError("invalid", "request_id must be 1-128 letters, digits, '_', '.', ':' or '-'")
    return verb, request_id


def _fingerprint(body: dict[str, Any]) -> str:
    canonical = json.dumps({k: v for k, v in body.items() if k != "request_id"}, sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _once(verb: str, request_id: str, body: dict[str, Any], deps: SessionApiDeps) -> ApiResponse:
    """Apply a mutating request once per request id; a retry gets the first receipt back."""
    key = f"session-api#{key_namespace(deps.settings.profile)}#{request_id}"
    fingerprint = _fingerprint(body)
    waited = 0.0
    while True:
        try:
            claim = deps.receipts.claim(key, fingerprint, deps.now())
        except TransientError:
            return ApiResponse.error(ApiError("unavailable"))
        if claim.status == "mismatch":
            return ApiResponse.error(ApiError("invalid", "request_id was already used for a different request"))
        if claim.status == "done" and claim.receipt is not None:
            return ApiResponse(int(claim.receipt["status"]), dict(claim.receipt["body"]), replayed=True)
        if claim.status == "claimed":
            break
        if waited >= deps.in_progress_wait:  # the first call is still applying it
            return ApiResponse.error(ApiError("busy", "the same request_id is being applied right now; retry"))
        deps.sleep(0.1)
        waited += 0.1
    token = claim.token
    assert token is not None
    try:
        response = _answer(verb, body, deps)
    except BaseException:
        _give_back(deps, key, token)  # a bug or a timeout: the retry decides afresh
        raise
    reason = None if response.body.get("ok") else response.body["error"]["reason"]
    if reason in RETRYABLE:
        _give_back(deps, key, token)
        return response
    receipt = {"status": response.status, "body": response.body}
    try:
        deps.receipts.complete(key, token, receipt, deps.now())
    except TransientError:
        # Applied, but the receipt is not stored: a retry finds the claim stale, and the change it
        # would repeat is refused by the session's fences (revision moved on).
        logger.warning("session api receipt not stored", extra={"verb": verb})
    return response


def _give_back(deps: SessionApiDeps, key: str, token: str) -> None:
    # If even that fails, the claim goes stale and the next retry takes it over.
    with contextlib.suppress(TransientError):
        deps.receipts.abandon(key, token)


def _answer(verb: str, body: dict[str, Any], deps: SessionApiDeps) -> ApiResponse:
    try:
        result = _VERBS[verb](body, deps)
    except ApiError as exc:
        return ApiResponse.error(exc)
    except Conflict:
        return ApiResponse.error(ApiError("conflict"))
    except SessionNotFound:
        return ApiResponse.error(ApiError("not_found"))
    except InvalidSessionRequest as exc:
        return ApiResponse.error(ApiError("invalid", str(exc)))
    except (InvalidIdentifier, BadRequest):
        return ApiResponse.error(ApiError("invalid", "an id in the request is not a safe identifier"))
    except SessionBusy:
        return ApiResponse.error(ApiError("busy"))
    except TransientError:
        return ApiResponse.error(ApiError("unavailable"))
    return ApiResponse(200, {"ok": True, **result})


# -- request fields --------------------------------------------------------------------------


def _str(body: dict[str, Any], name: str, *, required: bool = True, limit: int = 200) -> str | None:
    value = body.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > limit:
        raise ApiError("invalid", f"{name} must be non-empty text of at most {limit} characters")
    return value.strip()


def _int(body: dict[str, Any], name: str, *, required: bool = True, minimum: int = 0) -> int | None:
    value = body.get(name)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ApiError("invalid", f"{name} must be an integer >= {minimum}")
    return value


def _number(body: dict[str, Any], name: str) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ApiError("invalid", f"{name} must be a number")
    return float(value)


def _session(body: dict[str, Any], deps: SessionApiDeps) -> SessionInfo:
    """The session the request names, in this deployment's profile (another's is `not_found`)."""
    session_id = _str(body, "session_id", limit=128)
    assert session_id is not None
    validate_session_id(session_id)
    info = deps.stores.catalogue.get_session(session_id)
    if info is None or profile_of_key(info.session_key) != key_namespace(deps.settings.profile):
        raise ApiError("not_found")
    return info


def _fence(body: dict[str, Any], op: str) -> Fence:
    revision = _int(body, "revision", minimum=0)
    assert revision is not None
    generation = _int(body, "execution_generation", required=op in NEEDS_GENERATION, minimum=0)
    return Fence(revision, generation if op in NEEDS_GENERATION else None)


def _route_for(info: SessionInfo, deps: SessionApiDeps) -> SessionEntry | None:
    route = deps.stores.routes.get(info.session_key)
    return route if route is not None and route.session_id == info.session_id else None


def _not_running(info: SessionInfo, deps: SessionApiDeps) -> None:
    """A session whose turn is running is not changed under it (a turn that starts after this
    check bumps the execution generation, so the fenced write is refused instead)."""
    route = _route_for(info, deps)
    if route is not None and route.lease_held(deps.now()):
        raise ApiError("busy")


# -- views -----------------------------------------------------------------------------------


def session_view(info: SessionInfo, route: SessionEntry | None, now: float) -> dict[str, Any]:
    """What a client sees of a session: its record, plus its route's state when the key's route
    points at it (`current`). No lease token, no raw origin."""
    view: dict[str, Any] = {
        "session_id": info.session_id,
        "title": info.title,
        "platform": info.platform,
        "source": info.source_label,
        "started_at": info.started_at,
        "ended_at": info.ended_at,
        "end_reason": info.end_reason,
        "parent_session_id": info.parent_session_id,
        "continued_in": info.continued_in,
        "message_count": info.message_count,
        "tokens": {
            "input": info.input_tokens,
            "output": info.output_tokens,
            "cache_read": info.cache_read_tokens,
            "cache_write": info.cache_write_tokens,
            "total": info.total_tokens,
            "last_prompt": info.last_prompt_tokens,
        },
        "estimated_cost_usd": info.estimated_cost_usd,
        "cost_status": info.cost_status,
        "current": route is not None,
    }
    if route is not None:
        view.update(
            busy=route.lease_held(now),
            suspended=route.suspended,
            resume_pending=route.resume_pending,
            model_override=route.model_override.to_dict() if route.model_override else None,
            last_activity_at=route.last_activity_at or route.updated_at,
        )
    return view


def _fences(route: SessionEntry | None, info: SessionInfo, deps: SessionApiDeps) -> dict[str, Any]:
    """The fences a mutation of this session must carry: those of its key's route (which may point
    at another session now: a mutation is still fenced by the route it reads)."""
    current = route or deps.stores.routes.get(info.session_key)
    return {
        "revision": current.revision if current else None,
        "execution_generation": current.execution_generation if current else None,
    }


def _snapshot(info: SessionInfo, deps: SessionApiDeps, limit: int) -> dict[str, Any]:
    route = _route_for(info, deps)
    rows = deps.stores.transcript.window(info.session_id, upto_seq=None, limit=limit, hidden=info.hidden)
    return {
        "session": {
            "id": info.session_id,
            "title": info.title,
            **_fences(route, info, deps),
            "messages": [
                {
                    "id": row.seq,
                    "role": row.role,
                    "content": row.content,
                    "created_at": row.created_at,
                    "sender_name": row.sender_name,
                }
                for row in rows
            ],
            "info": session_view(info, route, deps.now()),
        }
    }


def _entry_view(entry: SessionEntry) -> dict[str, Any]:
    return {
        "id": entry.session_id,
        "revision": entry.revision,
        "execution_generation": entry.execution_generation,
    }


# -- verbs -----------------------------------------------------------------------------------


def _create(body: dict[str, Any], deps: SessionApiDeps) -> dict[str, Any]:
    """A new session for an API client. `chat` names the client's conversation (default: the
    request id), so one client can keep several; creating again for the same chat starts afresh."""
    chat = _str(body, "chat", required=False, limit=64) or re.sub(r"[^A-Za-z0-9_-]", "-", body["request_id"])[:64]
    if not _NAME.match(chat):
        raise ApiError("invalid", "chat must be 1-64 letters, digits, '_' or '-'")
    title = _str(body, "title", required=False, limit=100)
    source = SessionSource(platform=API_PLATFORM, chat_id=chat, chat_type="dm", user_id=chat, user_name="API")
    key = build_session_key(source, profile=deps.settings.profile)
    now = deps.now()
    entry = deps.stores.routes.open(source, key, now, force_new=True)
    if title is not None:
        deps.stores.edits.rename(entry.session_id, title, fence=Fence(entry.revision), now=now)
        entry = deps.stores.routes.get(key) or entry
    _emit(deps, "session:start", entry.session_id, key, source="api")
    return {"session": {**_entry_view(entry), "title": title}}


def _resume(body: dict[str, Any], deps: SessionApiDeps) -> dict[str, Any]:
    info = _session(body, deps)
    limit = _int(body, "limit", required=False, minimum=1) or MAX_MESSAGES
    return _snapshot(info, deps, min(limit, MAX_MESSAGES))


def _mutate(body: dict[str, Any], deps: SessionApiDeps) -> dict[str, Any]:
    op = body.get("op")
    if op not in OPS:
        raise ApiError("invalid", f"op must be one of {', '.join(OPS)}")
    fence = _fence(body, op)
    info = _session(body, deps)
    now = deps.now()
    store = deps.stores.edits
    if op != "rename":
        _not_running(info, deps)
    if op == "rename":
        title = _str(body, "title", limit=100)
        assert title is not None
        renamed = store.rename(info.session_id, title, fence=fence, now=now)
        return {"op": op, "session": {"id": renamed.session_id, "title": renamed.title, **_fences(None, info, deps)}}
    if op == "delete":
        store.delete_session(info.session_id, fence=fence, now=now)
        _emit(deps, "session:end", info.session_id, info.session_key, reason="deleted")
        return {"op": op, "deleted": info.session_id}
    if op == "rewind":
        to_seq = _int(body, "to_seq", minimum=0)
        assert to_seq is not None
        result = store.rewind(info.session_id, to_seq, fence=fence, now=now)
        return {
            "op": op,
            "removed": result.removed,
            "rewound_to": result.rewound_to_seq,
            "session": _entry_view(result.entry),
        }
    if op == "reset":
        entry = store.reset(info.session_key, fence=fence, now=now)
        if deps.starter is not None:  # BEHAVIOUR §3: the replaced session's memories are flushed
            origin = SessionSource.from_dict(dict(entry.origin)) if entry.origin else None  # the route keeps it
            lifecycle.flush_replaced(deps.starter, entry, origin, now)
        _emit(deps, "session:reset", entry.session_id, info.session_key, reason="forced", previous=info.session_id)
        return {"op": op, "previous": info.session_id, "session": _entry_view(entry)}
    if op == "branch":
        title = _str(body, "title", required=False, limit=100)
        entry = store.branch(info.session_id, fence=fence, now=now, title=title)
        _emit(deps, "session:start", entry.session_id, info.session_key, source="branch")
        return {"op": op, "parent": info.session_id, "session": _entry_view(entry)}
    if op == "model":
        raw = body.get("model")
        policy = deps.models or ModelPolicy.of(deps.settings)
        override = None if raw is None else policy.check(sanitize_model_override(raw))
        entry = store.set_model_override(info.session_key, override, fence=fence, now=now)
        return {
            "op": op,
            "model_override": override.to_dict() if override else None,
            "session": _entry_view(entry),
        }
    summary = _str(body, "summary", limit=MAX_SUMMARY)
    assert summary is not None
    keep_last = _int(body, "keep_last", required=False, minimum=0) or 0
    entry = store.compress(info.session_id, summary, fence=fence, now=now, keep_last=keep_last)
    return {"op": op, "parent": info.session_id, "session": _entry_view(entry)}


def _detach(body: dict[str, Any], deps: SessionApiDeps) -> dict[str, Any]:
    info = _session(body, deps)
    reason = _str(body, "end_reason", required=False, limit=40) or "detached"
    if not _END_REASON.match(reason):
        raise ApiError("invalid", "end_reason must be 1-40 lower-case letters, digits or '_'")
    ended = deps.stores.catalogue.end_session(info.session_id, reason, deps.now())
    if ended:
        _emit(deps, "session:end", info.session_id, info.session_key, reason=reason)
    return {"session_id": info.session_id, "ended": ended, "end_reason": reason}


def _list(body: dict[str, Any], deps: SessionApiDeps) -> dict[str, Any]:
    limit = min(_int(body, "limit", required=False, minimum=1) or 20, MAX_LIST)
    before = _number(body, "before")
    found = deps.stores.catalogue.list_sessions(key_namespace(deps.settings.profile), limit=limit, before=before)
    now = deps.now()
    routes: dict[str, SessionEntry | None] = {}  # one read per chat, however many of its sessions are listed
    for key in {info.session_key for info in found}:
        routes[key] = deps.stores.routes.get(key)
    sessions = []
    for info in found:
        route = routes[info.session_key]
        sessions.append(session_view(info, route if route and route.session_id == info.session_id else None, now))
    next_before = found[-1].started_at if len(found) == limit else None
    return {"sessions": sessions, "next_before": next_before}


def _search(body: dict[str, Any], deps: SessionApiDeps) -> dict[str, Any]:
    query = _str(body, "query", limit=200)
    assert query is not None
    limit = min(_int(body, "limit", required=False, minimum=1) or 20, MAX_LIST)
    hits = deps.stores.catalogue.search(key_namespace(deps.settings.profile), query, limit=limit)
    return {"hits": [asdict(hit) for hit in hits]}


_VERBS: dict[str, Callable[[dict[str, Any], SessionApiDeps], dict[str, Any]]] = {
    "session.create": _create,
    "session.resume": _resume,
    "session.mutate": _mutate,
    "session.detach": _detach,
    "session.list": _list,
    "session.search": _search,
}


def _emit(deps: SessionApiDeps, name: str, session_id: str, session_key: str, **detail: str) -> None:
    payload = {"session": hash_id(session_id), "key": hash_id(session_key), "via": "session_api", **detail}
    if "previous" in payload:
        payload["previous"] = hash_id(payload["previous"])
    deps.events.emit(name, payload)
