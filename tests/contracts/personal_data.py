"""The `PersonalData` and `Retention` ports' contract (`domain.ports`, BEHAVIOUR §11), run on the
unit tests' in-memory DynamoDB (tests/unit/test_session_storage_in_memory.py) and on DynamoDB in
moto (tests/integration/test_session_storage_on_dynamodb.py). Each `check_*` takes the session
storage factory `make(rules) -> SessionStores` the session contract uses."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import pytest

from hermes_gateway.domain.media import Attachment
from hermes_gateway.domain.ports import SenderRow, SessionStores
from hermes_gateway.domain.privacy import REDACTED, Person, ProfileScope
from hermes_gateway.domain.reset_policy import SessionRules
from hermes_gateway.domain.sessions import Fence, TranscriptRow
from hermes_gateway.domain.source import SessionSource, sender_of
from hermes_gateway.errors import SessionBusy
from tests.contracts.session_storage import DM, KEY, T0, begin, chat, fence, finish, route

AL = Person("telegram", "42")
BO_DM = SessionSource(platform="telegram", chat_id="77", chat_type="dm", user_id="43", user_name="Bo")
GROUP_AL = SessionSource(platform="telegram", chat_id="-100", chat_type="group", user_id="42", user_name="Al")
GROUP_BO = SessionSource(platform="telegram", chat_id="-100", chat_type="group", user_id="43", user_name="Bo")
GROUP_KEY = "agent:main:telegram:group:-100"
MAIN, CODER = ProfileScope("default"), ProfileScope("coder", "coder")
DAY = 86_400.0


def say(stores: SessionStores, source: SessionSource, key: str, text: str, at: float, *files: str) -> int:
    """A user row as the router writes it (with its sender and attachments), answered; its seq."""
    stores.routes.open(source, key, at)
    entry = route(stores, key)
    token, user_seq, reply_seq = begin(stores, f"e-{key}-{at}", at, key)
    media = tuple(Attachment("image", "image/jpeg", key=k) for k in files)
    row = TranscriptRow(user_seq, "user", text, at, sender_name=source.user_name, attachments=media,
                        sender=sender_of(source))  # fmt: skip
    stores.transcript.put(entry.session_id, row)
    stores.transcript.put_reply(entry.session_id, TranscriptRow(reply_seq, "assistant", f"re: {text}", at, turn_id="t"))
    finish(stores, token, at + 0.5, key)
    return user_seq


def every_sender_row(stores: SessionStores, sender: str) -> list[SenderRow]:
    found: list[SenderRow] = []
    cursor: str | None = None
    for _ in range(1000):
        page = stores.personal.sender_rows(sender, cursor)
        found += page.rows
        cursor = page.cursor
        if cursor is None:
            return found
    raise AssertionError("the Scan never reached the end of the table")


def table(stores: SessionStores) -> Any:
    return stores.edits.t  # type: ignore[attr-defined]  # the adapters' SessionTables


def check_a_persons_dm_sessions_are_found_by_reach_in_each_profile(make: Any) -> None:
    # Given Al's DM on two bots (one of them reset once), Bo's DM and a group Al spoke in
    stores = make(SessionRules())
    first = stores.routes.open(DM, KEY, T0)
    later = stores.routes.open(DM, KEY, T0 + 10, force_new=True)
    coder = stores.routes.open(DM, "agent:coder:telegram:dm:99", T0 + 20)
    stores.routes.open(BO_DM, "agent:main:telegram:dm:77", T0 + 30)
    say(stores, GROUP_AL, GROUP_KEY, "hello all", T0 + 40)
    # When his sessions are asked for, per profile
    mine = {s.session_id for s in stores.personal.sessions_reached(MAIN.dm_reach(AL))}
    # Then each profile answers with his DMs there, and nothing of Bo's or the group's
    assert mine == {first.session_id, later.session_id}
    assert [s.session_id for s in stores.personal.sessions_reached(CODER.dm_reach(AL))] == [coder.session_id]
    assert stores.personal.sessions_reached(MAIN.dm_reach(Person("telegram", "44"))) == []


def check_an_older_dm_without_reach_is_found_by_its_key_only(make: Any) -> None:
    # Given a DM session written before sessions carried their reach, beside a newer one of the key
    # (on Telegram a private chat's id is the user's)
    stores = make(SessionRules())
    own_chat, key = replace(DM, chat_id="42"), "agent:main:telegram:dm:42"
    t = table(stores)
    old = t.new_session(key, T0, "telegram", "DM with Al")
    t.sessions.put(old)
    newer = stores.routes.open(own_chat, key, T0 + 5)
    # Then the key finds the old one only (the newer is found by its reach)
    assert MAIN.legacy_dm_key(AL) == key
    assert [s.session_id for s in stores.personal.unreached_sessions_keyed(key)] == [old["session_id"]]
    assert [s.session_id for s in stores.personal.sessions_reached(MAIN.dm_reach(AL))] == [newer.session_id]


def check_erasing_a_session_deletes_its_route_rows_title_and_record(make: Any) -> None:
    # Given Al's DM with a titled session, a photo, and an undone turn
    stores = make(SessionRules())
    entry = stores.routes.open(DM, KEY, T0)
    say(stores, DM, KEY, "look at this", T0 + 1, "default/s/1-0")
    chat(stores, "q2", "a2", at=T0 + 2)
    stores.edits.rename(entry.session_id, "Holiday", fence=Fence(route(stores).revision), now=T0 + 3)
    stores.edits.undo(entry.session_id, 1, fence=fence(route(stores)), now=T0 + 4)
    # An export reads every row as stored, the undone ones too
    whole = stores.personal.transcript(entry.session_id)
    assert [(r.content, r.active) for r in whole][:2] == [("look at this", True), ("re: look at this", True)]
    assert len(whole) == 4 and whole[0].attachments[0].key == "default/s/1-0"
    # When the session is erased
    erased = stores.personal.erase_session(entry.session_id, T0 + 5)
    # Then route, rows, record and title are gone, and what it named is told
    assert (erased.rows, erased.media_keys, erased.chat_id) == (4, ("default/s/1-0",), "99")
    assert stores.routes.get(KEY) is None and stores.catalogue.get_session(entry.session_id) is None
    assert stores.personal.transcript(entry.session_id) == []
    assert stores.catalogue.find_session_by_title("agent:main", "Holiday") is None
    other = stores.routes.open(BO_DM, "agent:main:telegram:dm:77", T0 + 6)
    stores.edits.rename(other.session_id, "Holiday", fence=Fence(other.revision), now=T0 + 7)  # the title is free
    # and erasing it again finds nothing to do
    assert stores.personal.erase_session(entry.session_id, T0 + 8).rows == 0


def check_a_session_a_turn_holds_is_not_erased(make: Any) -> None:
    stores = make(SessionRules())
    entry = stores.routes.open(DM, KEY, T0)
    chat(stores, "q1", "a1", at=T0 + 1)
    begin(stores, "e-running", T0 + 2)  # a turn runs
    with pytest.raises(SessionBusy):
        stores.personal.erase_session(entry.session_id, T0 + 3)
    assert stores.routes.get(KEY) is not None and stores.catalogue.get_session(entry.session_id) is not None
    assert len(stores.personal.transcript(entry.session_id)) == 2


def check_a_senders_rows_are_found_page_by_page_and_redacted(make: Any) -> None:
    # Given a group where Al and Bo talk (Al with a photo), and Al's DM
    stores = make(SessionRules())
    al_seq = say(stores, GROUP_AL, GROUP_KEY, "my address is 1 Elm St", T0, "default/g/1-0")
    bo_seq = say(stores, GROUP_BO, GROUP_KEY, "Bo here", T0 + 1)
    for n in range(6):  # enough rows for several pages of the fake's Scan
        say(stores, GROUP_BO, GROUP_KEY, f"Bo again {n}", T0 + 2 + n)
    say(stores, DM, KEY, "in my DM", T0 + 10)
    group_id = route(stores, GROUP_KEY).session_id
    # When Al's rows are looked for, page by page to the end
    found = every_sender_row(stores, AL.handle)
    # Then exactly his two rows are found, with what they hold
    assert sorted((f.row.content, f.row.seq) for f in found) == [("in my DM", 1), ("my address is 1 Elm St", al_seq)]
    in_group = next(f for f in found if f.session_id == group_id)
    assert [a.key for a in in_group.row.attachments] == ["default/g/1-0"]
    # When his group row is redacted
    assert stores.personal.redact(group_id, al_seq, AL.handle, REDACTED)
    # Then it keeps its place but holds nothing of his; Bo's rows and the bot's answers stay
    rows = {r.seq: r for r in stores.personal.transcript(group_id)}
    assert (rows[al_seq].content, rows[al_seq].attachments, rows[al_seq].sender, rows[al_seq].sender_name) == (
        REDACTED, (), None, None,
    )  # fmt: skip
    assert rows[al_seq + 1].content == "re: my address is 1 Elm St"
    assert (rows[bo_seq].content, rows[bo_seq].sender) == ("Bo here", sender_of(GROUP_BO))
    # and a redacted row is no longer his: a second pass finds and changes nothing there
    assert not stores.personal.redact(group_id, al_seq, AL.handle, REDACTED)
    assert [f.session_id for f in every_sender_row(stores, AL.handle)] == [route(stores).session_id]


def check_rows_carry_their_retention_and_are_not_read_past_it(make: Any) -> None:
    # Given rows kept one day: one written two days ago, one now (TTL deletes only eventually)
    stores = make(SessionRules(retention_seconds=int(DAY)))
    now = time.time()
    entry = stores.routes.open(DM, KEY, now - 2 * DAY)
    chat(stores, "old question", "old answer", at=now - 2 * DAY)
    chat(stores, "new question", "new answer", at=now)
    items = list(table(stores).messages.query(_partition(entry.session_id)))
    assert len(items) == 4 and all(DAY - 1 < i["expires_at"] - i["created_at"] <= DAY for i in items)
    # Then readers see the rows within their retention only
    assert [r.content for r in stores.transcript.rows(entry.session_id)] == ["new question", "new answer"]
    window = stores.transcript.window(entry.session_id, upto_seq=None, limit=10)
    assert [r.content for r in window] == ["new question", "new answer"]
    assert [h.seq for h in stores.catalogue.search("agent:main", "question")] == [3]
    # and an erasure that leaves timed rows to TTL deletes only rows without an expiry
    table(stores).messages.put({"session_id": entry.session_id, "seq": 99, "role": "user", "content": "before"})
    erased = stores.personal.erase_session(entry.session_id, now, timed_rows=False)
    assert erased.rows == 1 and {int(i["seq"]) for i in table(stores).messages.query(_partition(entry.session_id))} == {
        1, 2, 3, 4,
    }  # fmt: skip


def check_aged_sessions_are_walked_oldest_first_with_their_activity(make: Any) -> None:
    # Given four sessions of one profile: ended, live and idle, live and used, and a young one
    stores = make(SessionRules())
    ended = stores.routes.open(DM, KEY, T0)
    chat(stores, "q", "a", at=T0 + 1)
    live = stores.routes.open(DM, KEY, T0 + 100, force_new=True)  # ends the first
    chat(stores, "q", "a", at=T0 + 200)
    group = stores.routes.open(GROUP_AL, GROUP_KEY, T0 + 300)
    stores.routes.open(BO_DM, "agent:main:telegram:dm:77", T0 + 10_000)
    stores.routes.open(DM, "agent:coder:telegram:dm:99", T0 + 50)  # another profile's
    # When the sessions started before T0 + 5000 are walked two at a time
    first, cursor = stores.retention.aged_sessions("agent:main", T0 + 5000, None, 2)
    rest, end = stores.retention.aged_sessions("agent:main", T0 + 5000, cursor, 2)
    # Then each comes once, oldest first, with what says when it was last used
    assert [s.session_id for s in first + rest] == [ended.session_id, live.session_id, group.session_id]
    assert cursor is not None and end is None
    assert first[0].ended_at == T0 + 100 and first[0].route_activity_at is None
    assert first[1].ended_at is None and first[1].newest_row_at == T0 + 200
    assert first[1].route_activity_at is not None and first[1].route_activity_at >= T0 + 200
    assert rest[0].newest_row_at is None
    # and a pass's place is kept
    stores.retention.save_pass_state("agent:main", {"after": cursor})
    assert stores.retention.pass_state("agent:main") == {"after": cursor}
    assert stores.retention.pass_state("agent:coder") == {}


def _partition(session_id: str) -> Any:
    from hermes_gateway.adapters.dynamo_table import condition

    return condition(None, "{session_id} = {:s}", s=session_id)


CHECKS = [value for name, value in sorted(globals().items()) if name.startswith("check_")]
