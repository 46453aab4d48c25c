"""The session API (BEHAVIOUR §3): verbs, fences, receipts, bounded reason codes, profile scope."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from hermes_gateway.domain.ports import SessionStores
from hermes_gateway.domain.session_key import build_session_key
from hermes_gateway.domain.sessions import SessionTally, TranscriptRow
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.errors import TransientError
from hermes_gateway.services.session_api import REASONS, ApiResponse, SessionApiDeps, handle_request
from tests.fakes.receipts import FakeReceipts
from tests.fakes.services import FakeEvents, make_settings
from tests.fakes.sessions import memory_stores, seed

NOW = 1_800_000_000.0
DM = SessionSource("telegram", chat_id="99", user_id="42", user_name="Al")


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        self.now += 1
        return self.now


def make_deps(stores: SessionStores | None = None, profile: str = "default", **kwargs: Any) -> SessionApiDeps:
    settings = make_settings({"GATEWAY_PROFILE": profile})
    return SessionApiDeps(
        settings=settings,
        stores=stores or memory_stores(),
        receipts=kwargs.pop("receipts", FakeReceipts()),
        events=kwargs.pop("events", FakeEvents()),
        now=kwargs.pop("now", Clock()),
        sleep=kwargs.pop("sleep", lambda seconds: None),
        **kwargs,
    )


def chat_session(stores: SessionStores, texts: list[str], profile: str | None = None) -> str:
    """A telegram DM session with alternating user/assistant rows."""
    return seed(stores, DM, build_session_key(DM, profile=profile), *texts, now=NOW)


def hold(stores: SessionStores, key: str, at: float) -> str:
    """A turn takes the session's lease; its token."""
    entry = stores.routes.get(key)
    assert entry is not None and stores.leases.begin(entry, "turn-1", "tok", f"e{at}", at) is not None
    return "tok"


def release(stores: SessionStores, key: str, at: float) -> None:
    entry = stores.routes.get(key)
    assert entry is not None
    finished = stores.leases.finish(
        key,
        entry.session_id,
        "tok",
        lambda queue, seq: None,
        at,
        tally=SessionTally(),
        succeeded=True,  # type: ignore[arg-type,return-value]
    )
    assert finished.status == "released"


def call(deps: SessionApiDeps, **body: Any) -> ApiResponse:
    return handle_request(body, deps)


def resume(deps: SessionApiDeps, session_id: str) -> dict[str, Any]:
    response = call(deps, verb="session.resume", session_id=session_id)
    assert response.status == 200, response.body
    return dict(response.body["session"])


def mutate(deps: SessionApiDeps, session_id: str, op: str, request_id: str, **extra: Any) -> ApiResponse:
    snap = resume(deps, session_id)
    body = {"revision": snap["revision"], "execution_generation": snap["execution_generation"], **extra}
    return call(deps, verb="session.mutate", op=op, request_id=request_id, session_id=session_id, **body)


def test_resume_returns_a_snapshot_with_row_ids_and_fences() -> None:
    # Given a session with two messages
    deps = make_deps()
    session_id = chat_session(deps.stores, ["hello", "hi there"])
    # When it is resumed
    snap = resume(deps, session_id)
    # Then the snapshot carries its id, title, messages with row ids, and the fences
    assert snap["id"] == session_id and snap["title"] is None
    assert [(m["id"], m["role"], m["content"]) for m in snap["messages"]] == [
        (1, "user", "hello"),
        (2, "assistant", "hi there"),
    ]
    route = deps.stores.routes.get(build_session_key(DM))
    assert route is not None
    assert (snap["revision"], snap["execution_generation"]) == (route.revision, route.execution_generation)
    assert snap["info"]["message_count"] == 2 and snap["info"]["current"] is True
    assert snap["info"]["busy"] is False and "lease_token" not in str(snap)


def test_rename_then_a_stale_revision_is_a_conflict_and_changes_nothing() -> None:
    deps = make_deps()
    session_id = chat_session(deps.stores, ["hello"])
    snap = resume(deps, session_id)
    first = call(
        deps,
        verb="session.mutate",
        op="rename",
        request_id="r1",
        session_id=session_id,
        revision=snap["revision"],
        title="Trip plans",
    )
    assert first.status == 200 and first.body["session"]["title"] == "Trip plans"
    # When a second client renames with the revision it read before the first rename
    stale = call(
        deps,
        verb="session.mutate",
        op="rename",
        request_id="r2",
        session_id=session_id,
        revision=snap["revision"],
        title="Other",
    )
    # Then it is refused with `conflict` (409) and the title stays
    assert stale.status == 409 and stale.body["error"]["reason"] == "conflict"
    assert resume(deps, session_id)["title"] == "Trip plans"


@pytest.mark.parametrize("op", ["delete", "rewind", "reset", "branch", "model", "compress"])
def test_every_op_but_rename_needs_the_execution_generation(op: str) -> None:
    deps = make_deps()
    session_id = chat_session(deps.stores, ["hello", "hi"])
    snap = resume(deps, session_id)
    extra = {"to_seq": 1, "model": {"model": "gpt-4o"}, "summary": "s"}
    missing = call(
        deps, verb="session.mutate", op=op, request_id="x", session_id=session_id, revision=snap["revision"], **extra
    )
    assert missing.status == 400 and missing.body["error"]["reason"] == "invalid"
    # A turn started since the read: the generation moved on, the mutation is refused
    key = build_session_key(DM)
    hold(deps.stores, key, NOW)
    release(deps.stores, key, NOW + 1)
    stale = call(
        deps,
        verb="session.mutate",
        op=op,
        request_id="y",
        session_id=session_id,
        revision=snap["revision"],
        execution_generation=snap["execution_generation"],
        **extra,
    )
    assert stale.status == 409 and stale.body["error"]["reason"] == "conflict"
    assert resume(deps, session_id)["messages"] == snap["messages"]


def test_a_retried_request_returns_its_first_receipt_and_applies_once() -> None:
    # Given a rewind applied once
    deps = make_deps()
    session_id = chat_session(deps.stores, ["a", "b", "c", "d"])
    snap = resume(deps, session_id)
    body = {
        "verb": "session.mutate",
        "op": "rewind",
        "request_id": "req-1",
        "session_id": session_id,
        "revision": snap["revision"],
        "execution_generation": snap["execution_generation"],
        "to_seq": 2,
    }
    first = handle_request(dict(body), deps)
    assert first.status == 200 and first.body["removed"] == 2
    # When the client retries the same request (its answer was lost)
    again = handle_request(dict(body), deps)
    # Then it gets the first receipt back, marked as a replay, and nothing changes twice
    assert again.replayed and again.status == 200 and again.body == first.body
    assert [m["id"] for m in resume(deps, session_id)["messages"]] == [1, 2]
    # And a refusal is a receipt too: the same id with a stale fence answers the same way again
    stale = handle_request({**body, "request_id": "req-2"}, deps)
    assert stale.status == 409
    assert handle_request({**body, "request_id": "req-2"}, deps).body == stale.body


def test_a_request_id_reused_for_another_request_is_invalid() -> None:
    deps = make_deps()
    session_id = chat_session(deps.stores, ["a"])
    snap = resume(deps, session_id)
    base = {"verb": "session.mutate", "op": "rename", "request_id": "same", "session_id": session_id}
    assert handle_request({**base, "revision": snap["revision"], "title": "One"}, deps).status == 200
    reused = handle_request({**base, "revision": snap["revision"], "title": "Two"}, deps)
    assert reused.status == 400 and "different request" in reused.body["error"]["message"]


def test_concurrent_retries_apply_once_and_all_see_the_same_receipt() -> None:
    # Given one branch request sent by eight racing retries
    deps = make_deps(in_progress_wait=5.0, sleep=lambda s: threading.Event().wait(0.01))
    session_id = chat_session(deps.stores, ["a", "b"])
    snap = resume(deps, session_id)
    body = {
        "verb": "session.mutate",
        "op": "branch",
        "request_id": "branch-1",
        "session_id": session_id,
        "revision": snap["revision"],
        "execution_generation": snap["execution_generation"],
    }
    answers: list[ApiResponse] = []
    threads = [threading.Thread(target=lambda: answers.append(handle_request(dict(body), deps))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then exactly one child session exists and every answer names it
    assert {a.status for a in answers} == {200}
    children = {a.body["session"]["id"] for a in answers}
    assert len(children) == 1
    assert sum(1 for a in answers if not a.replayed) == 1
    children_in_store = [
        s for s in deps.stores.catalogue.list_sessions("agent:main") if s.parent_session_id == session_id
    ]
    assert len(children_in_store) == 1


def test_create_list_search_and_detach() -> None:
    events = FakeEvents()
    deps = make_deps(events=events)
    created = call(deps, verb="session.create", request_id="c1", chat="notebook", title="Notes")
    assert created.status == 200, created.body
    session_id = created.body["session"]["id"]
    assert created.body["session"]["title"] == "Notes"
    listed = call(deps, verb="session.list")
    assert [s["session_id"] for s in listed.body["sessions"]] == [session_id]
    assert listed.body["sessions"][0]["title"] == "Notes"
    info = deps.stores.catalogue.get_session(session_id)
    assert info is not None
    seq = deps.stores.leases.allocate(info.session_key, session_id, 1, NOW)
    assert seq is not None
    deps.stores.transcript.put(session_id, TranscriptRow(seq, "user", "the blue whale is big", NOW))
    hits = call(deps, verb="session.search", query="WHALE").body["hits"]
    assert [h["session_id"] for h in hits] == [session_id] and "whale" in hits[0]["snippet"]
    detached = call(deps, verb="session.detach", request_id="d1", session_id=session_id, end_reason="client_closed")
    assert detached.body == {"ok": True, "session_id": session_id, "ended": True, "end_reason": "client_closed"}
    assert resume(deps, session_id)["info"]["end_reason"] == "client_closed"
    names = [name for name, _ in events.emitted]
    assert names == ["session:start", "session:end"]
    assert all(session_id not in str(detail) for _, detail in events.emitted)  # ids hashed


def test_sessions_are_scoped_to_the_deployment_profile() -> None:
    # Given one store shared by two profiles, with a session in profile "coder"
    store = memory_stores()
    coder_session = chat_session(store, ["secret plans"], profile="coder")
    main = make_deps(store, profile="default")
    coder = make_deps(store, profile="coder")
    # Then the default profile can neither see, find nor change it
    assert call(main, verb="session.list").body["sessions"] == []
    assert call(main, verb="session.search", query="secret").body["hits"] == []
    refused = call(main, verb="session.resume", session_id=coder_session)
    assert refused.status == 404 and refused.body["error"]["reason"] == "not_found"
    assert (
        call(main, verb="session.detach", request_id="d", session_id=coder_session).body["error"]["reason"]
        == "not_found"
    )
    # While its own profile can
    assert [s["session_id"] for s in call(coder, verb="session.list").body["sessions"]] == [coder_session]


def test_a_running_turn_makes_destructive_ops_busy() -> None:
    deps = make_deps()
    session_id = chat_session(deps.stores, ["a", "b"])
    key = build_session_key(DM)
    snap_before = resume(deps, session_id)
    hold(deps.stores, key, NOW + 100)
    snap = resume(deps, session_id)
    assert snap["info"]["busy"] is True and snap["execution_generation"] > snap_before["execution_generation"]
    busy = call(
        deps,
        verb="session.mutate",
        op="rewind",
        request_id="rw",
        session_id=session_id,
        revision=snap["revision"],
        execution_generation=snap["execution_generation"],
        to_seq=0,
    )
    assert busy.status == 423 and busy.body["error"]["reason"] == "busy"
    # A busy answer is not a receipt: once the turn ends, the same request is decided afresh
    # (here refused: the turn moved the session on, so the fences the client read are stale)
    release(deps.stores, key, NOW + 150)
    again = call(
        deps,
        verb="session.mutate",
        op="rewind",
        request_id="rw",
        session_id=session_id,
        revision=snap["revision"],
        execution_generation=snap["execution_generation"],
        to_seq=0,
    )
    assert again.status == 409 and not again.replayed
    fresh = resume(deps, session_id)
    applied = mutate(deps, session_id, "rewind", "rw-2", to_seq=0)
    assert applied.status == 200 and applied.body["removed"] == 2 and len(fresh["messages"]) == 2


def test_model_override_is_sanitized_and_keys_are_refused() -> None:
    deps = make_deps()
    session_id = chat_session(deps.stores, ["a"])
    ok = mutate(deps, session_id, "model", "m1", model={"model": "gpt-4o", "provider": "openai"})
    assert ok.status == 200 and ok.body["model_override"] == {"model": "gpt-4o", "provider": "openai"}
    assert resume(deps, session_id)["info"]["model_override"] == {"model": "gpt-4o", "provider": "openai"}
    leaked = mutate(deps, session_id, "model", "m2", model={"model": "gpt-4o", "api_key": "sk-" + "abcdefghijklmnop"})
    assert leaked.status == 400 and "sk-" not in str(leaked.body)
    cleared = mutate(deps, session_id, "model", "m3", model=None)
    assert cleared.status == 200 and resume(deps, session_id)["info"]["model_override"] is None


def test_reset_branch_compress_and_delete() -> None:
    events = FakeEvents()
    deps = make_deps(events=events)
    session_id = chat_session(deps.stores, ["a", "b", "c", "d"])
    branched = mutate(deps, session_id, "branch", "b1", title="Fork")
    child = branched.body["session"]["id"]
    assert branched.status == 200 and branched.body["parent"] == session_id
    assert [m["content"] for m in resume(deps, child)["messages"]] == ["a", "b", "c", "d"]
    compressed = mutate(deps, child, "compress", "c1", summary="we talked about letters", keep_last=1)
    grandchild = compressed.body["session"]["id"]
    assert [m["content"] for m in resume(deps, grandchild)["messages"]] == ["we talked about letters", "d"]
    reset = mutate(deps, grandchild, "reset", "x1")
    fresh = reset.body["session"]["id"]
    assert reset.status == 200 and fresh not in (session_id, child, grandchild)
    assert resume(deps, fresh)["messages"] == []
    deleted = mutate(deps, fresh, "delete", "del1")
    assert deleted.status == 200 and call(deps, verb="session.resume", session_id=fresh).status == 404
    assert "session:reset" in [name for name, _ in events.emitted]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (None, "invalid"),
        ([], "invalid"),
        ({"verb": "session.drop"}, "invalid"),
        ({"verb": "session.mutate", "op": "rename"}, "invalid"),  # no request id
        ({"verb": "session.mutate", "request_id": "a b", "op": "rename"}, "invalid"),
        ({"verb": "session.mutate", "request_id": "a", "op": "explode", "revision": 1}, "invalid"),
        ({"verb": "session.resume", "session_id": "../etc"}, "invalid"),
        ({"verb": "session.resume", "session_id": "20260101_000000_00000000"}, "not_found"),
        ({"verb": "session.resume"}, "invalid"),
        ({"verb": "session.list", "limit": "ten"}, "invalid"),
        ({"verb": "session.search", "query": ""}, "invalid"),
        ({"verb": "session.detach", "request_id": "d", "session_id": "x", "end_reason": "Bye!"}, "not_found"),
    ],
)
def test_bad_requests_get_a_bounded_reason_code(body: Any, reason: str) -> None:
    response = handle_request(body, make_deps())
    assert response.body["ok"] is False
    assert response.body["error"]["reason"] == reason and response.status == REASONS[reason]
    assert set(response.body["error"]) == {"reason", "message"}


def test_an_unavailable_store_answers_503_and_gives_the_request_id_back() -> None:
    stores = memory_stores()

    class Throttled:
        fail = True

        def __getattr__(self, name: str) -> Any:
            return getattr(stores.catalogue, name)

        def end_session(self, session_id: str, reason: str, now: float) -> bool:
            if self.fail:
                raise TransientError("throttled")
            return stores.catalogue.end_session(session_id, reason, now)

    throttled = Throttled()
    from dataclasses import replace

    deps = make_deps(replace(stores, catalogue=throttled))  # type: ignore[arg-type]
    session_id = chat_session(stores, ["a"])
    body = {"verb": "session.detach", "request_id": "d1", "session_id": session_id}
    first = handle_request(dict(body), deps)
    assert first.status == 503 and first.body["error"]["reason"] == "unavailable"
    throttled.fail = False
    second = handle_request(dict(body), deps)
    assert second.status == 200 and second.body["ended"] is True and not second.replayed


@pytest.mark.parametrize(
    ("path", "profile"),
    [("/api/sessions", None), ("/p/coder/api/sessions", "coder"), ("/p/my_bot/api/sessions/", "my_bot")],
)
def test_the_route_names_the_profile(path: str, profile: str | None) -> None:
    from hermes_gateway.services.session_api import route_profile

    assert route_profile(path) == profile
