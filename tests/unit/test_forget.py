"""Forget (BEHAVIOUR §11): `/forget` and its confirmation in the chat, the erasure of one person's
data in every profile (services/forget.py), and the tick that carries a chat's request out. The
session tables are the real adapters on the in-memory DynamoDB; the other stores are the fakes
held to their adapters' rules."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, replace
from typing import Any

import pytest

from hermes_gateway.adapters.dynamo_erasures import DynamoErasureRequests
from hermes_gateway.adapters.dynamo_table import Update
from hermes_gateway.domain.cron import Job
from hermes_gateway.domain.limits import periods
from hermes_gateway.domain.pairing import Approval
from hermes_gateway.domain.ports import SessionStores
from hermes_gateway.domain.privacy import REDACTED, ErasureRequest, Person, ProfileScope
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.domain.turns import compact_source
from hermes_gateway.resources import ACCESS, Bindings
from hermes_gateway.services.commands import CommandContext, answer_command
from hermes_gateway.services.export import export_person
from hermes_gateway.services.forget import PersonalStores, ScanPace, erase_confirmed, forget
from tests.contracts import erasure_requests
from tests.contracts.personal_data import BO_DM, GROUP_AL, GROUP_BO, GROUP_KEY, say, table
from tests.contracts.session_storage import begin, route
from tests.fakes.access import FakePairingStore
from tests.fakes.dynamo import MemoryDynamo, session_tables_client
from tests.fakes.jobs import FakeJobStore
from tests.fakes.media_store import MemoryMedia
from tests.fakes.memory_notes import FakeNoteStore
from tests.fakes.services import FakeDeliveryQueue, make_settings
from tests.fakes.sessions import memory_stores, usage_book

T0 = 1_800_000_000.0
AL = Person("telegram", "42")
AL_DM = SessionSource(platform="telegram", chat_id="42", chat_type="dm", user_id="42", user_name="Al")
AL_KEY, AL_CODER_KEY, BO_KEY = "agent:main:telegram:dm:42", "agent:coder:telegram:dm:42", "agent:main:telegram:dm:77"
SCOPES = (ProfileScope("default"), ProfileScope("coder", "coder"))
BO = Person("telegram", "43")


def erasure_store() -> DynamoErasureRequests:
    client = MemoryDynamo()
    client.create_table(ACCESS.name, "pk", "sk")
    return DynamoErasureRequests(Bindings({ACCESS.name: ACCESS.name}, {}, {}), client=client)


@dataclass
class World:
    stores: SessionStores
    personal: PersonalStores
    media: MemoryMedia
    notes: FakeNoteStore
    pairing: FakePairingStore
    jobs: FakeJobStore
    ids: dict[str, str]

    def files(self, *names: str) -> None:
        for name in names:
            self.media.put(name, b"bytes of " + name.encode(), "image/jpeg")


@pytest.fixture
def world() -> World:
    """Al on two bots (a DM on each, a photo in the first), in a group with Bo (a photo there too),
    with notes, pairings and jobs; Bo with a DM, a note, a pairing and a job of his own."""
    client = session_tables_client()
    stores, usage = memory_stores(client=client), usage_book(client)
    media, notes, pairing, jobs = MemoryMedia(), FakeNoteStore(), FakePairingStore(), FakeJobStore()
    personal = PersonalStores(SCOPES, stores.personal, notes, pairing, jobs, media, usage)
    w = World(stores, personal, media, notes, pairing, jobs, {})
    al_dm = stores.routes.open(AL_DM, AL_KEY, T0).session_id
    say(stores, AL_DM, AL_KEY, "my passport is X123", T0 + 1, f"default/{al_dm}/1-0")
    w.files(f"default/{al_dm}/1-0", f"default/{al_dm}/1-0.json", f"default/{al_dm}/out/d1-0")
    say(stores, AL_DM, AL_CODER_KEY, "code with me", T0 + 2)
    group = stores.routes.open(GROUP_AL, GROUP_KEY, T0 + 3).session_id
    say(stores, GROUP_AL, GROUP_KEY, "my address is 1 Elm St", T0 + 4, f"default/{group}/1-0")
    say(stores, GROUP_BO, GROUP_KEY, "Bo here", T0 + 5, f"default/{group}/3-0")
    w.files(f"default/{group}/1-0", f"default/{group}/1-0.json", f"default/{group}/3-0", f"default/{group}/3-0.json")
    bo_dm = stores.routes.open(BO_DM, BO_KEY, T0 + 6).session_id
    say(stores, BO_DM, BO_KEY, "Bo's secret", T0 + 7, f"default/{bo_dm}/1-0")
    w.files(f"default/{bo_dm}/1-0")
    for scope, text in ((SCOPES[0], "prefers tea"), (SCOPES[0], "lives in Leeds"), (SCOPES[1], "writes Rust")):
        notes.add_note(scope.memory_scope(AL), text[:6], text, T0, 100)
    notes.add_note(SCOPES[0].memory_scope(BO), "n", "Bo likes jazz", T0, 100)
    for platform, user in (("telegram", "42"), ("telegram@coder", "42"), ("telegram", "43")):
        pairing.approvals[(platform, user)] = Approval(platform, user, "someone", T0, "cli:op")
    # jobs from before jobs kept their creator (found by their origin chat), and jobs that keep it
    for job_id, chat, profile, creator in (
        ("j00000000000a", "42", "default", None), ("j00000000000b", "-100", "default", None),
        ("j00000000000c", "77", "default", None), ("j00000000000d", "42", "coder", None),
        ("j00000000000e", "42", "default", AL_DM), ("j00000000000f", "-100", "default", GROUP_AL),
        ("j00000000000g", "77", "default", BO_DM),
    ):  # fmt: skip
        origin = {"platform": "telegram", "chat_id": chat}
        made_by = compact_source(creator) if creator else None
        jobs.create(Job(job_id, "job", "remind me", "every 2h", ("origin",), origin, T0, T0 + 7200, profile=profile,
                        creator=made_by))  # fmt: skip
    # usage (limits, /usage): Al's and Bo's counters on the group's route, Al's records of his sessions
    today, al, bo = periods(T0), SCOPES[0].usage_owner(AL), SCOPES[0].usage_owner(BO)
    assert al is not None and bo is not None
    for owner in (al, bo):
        table(stores).routes.update({"session_key": GROUP_KEY}, Update().set(f"uq{owner.spender}", [1, 1]))
    for key in (AL_KEY, GROUP_KEY):
        usage.note_used(al, key, today)
    usage.tell(al, "messages_per_minute@1", today)
    w.ids = {"al_dm": al_dm, "group": group, "bo_dm": bo_dm}
    return w


def group_rows(w: World) -> list[tuple[str, str | None]]:
    return [(r.content, r.sender_name) for r in w.stores.personal.transcript(w.ids["group"])]


# -- the erasure --------------------------------------------------------------------------------


def test_forget_erases_a_persons_data_in_every_profile_and_redacts_them_in_groups(world: World) -> None:
    # When Al is forgotten
    report = forget(world.personal, AL, T0 + 100, ScanPace(sleep=lambda _: None))
    # Then his DM sessions on both bots are gone, with their routes, rows and files
    for scope in SCOPES:
        assert world.stores.personal.sessions_reached(scope.dm_reach(AL)) == []
    assert world.stores.routes.get(AL_KEY) is None and world.stores.routes.get(AL_CODER_KEY) is None
    assert world.stores.personal.transcript(world.ids["al_dm"]) == []
    assert world.media.keys(f"default/{world.ids['al_dm']}/") == []
    # his group message is redacted, its photo gone; Bo's message, its photo and the bot's answers stay
    assert group_rows(world) == [
        (REDACTED, None), ("re: my address is 1 Elm St", None), ("Bo here", "Bo"), ("re: Bo here", None),
    ]  # fmt: skip
    group = world.ids["group"]
    assert world.media.keys(f"default/{group}/") == [f"default/{group}/3-0", f"default/{group}/3-0.json"]
    # his notes, pairings and the jobs made in his DMs (on both bots) are gone; the group's job stays
    assert all(world.notes.list_notes(scope.memory_scope(AL)) == [] for scope in SCOPES)
    assert set(world.pairing.approvals) == {("telegram", "43")}
    # a job he made in the group stays the group's, without his name; Bo's stay his
    assert sorted(world.jobs.jobs) == ["j00000000000b", "j00000000000c", "j00000000000f", "j00000000000g"]
    assert world.jobs.jobs["j00000000000f"].creator is None
    assert world.jobs.jobs["j00000000000g"].creator == compact_source(BO_DM)
    # his usage counters and records are gone (Bo's counters on the group's route stay)
    book, al, bo = world.personal.usage, SCOPES[0].usage_owner(AL), SCOPES[0].usage_owner(BO)
    assert book is not None and al is not None and bo is not None
    assert book.held(al) == {"sessions_used": [], "told_window": None, "counters": {}}
    assert book.ledgers([GROUP_KEY], al.spender) == [] and len(book.ledgers([GROUP_KEY], bo.spender)) == 1
    # and nothing of Bo's changed
    assert [r.content for r in world.stores.personal.transcript(world.ids["bo_dm"])] == [
        "Bo's secret",
        "re: Bo's secret",
    ]
    assert world.media.keys(f"default/{world.ids['bo_dm']}/") == [f"default/{world.ids['bo_dm']}/1-0"]
    assert [n.text for n in world.notes.list_notes(SCOPES[0].memory_scope(BO))] == ["Bo likes jazz"]
    # The report counts it and says what it could not reach
    assert report.done and report.cursor is None
    counts = report.counts.to_dict()
    assert {k: counts[k] for k in ("sessions", "rows", "redacted", "files", "notes", "pairings", "jobs", "usage")} == {
        "sessions": 2, "rows": 4, "redacted": 1, "files": 5, "notes": 3, "pairings": 2, "jobs": 3, "usage": 4,
    }  # fmt: skip
    assert counts["group_jobs"] == 1 and "(1 made in groups kept for them, without your name)" in report.summary()
    assert any("before this release" in note for note in report.not_covered)


def test_forgetting_again_finds_nothing_more(world: World) -> None:
    forget(world.personal, AL, T0 + 100, ScanPace(sleep=lambda _: None))
    again = forget(world.personal, AL, T0 + 200, ScanPace(sleep=lambda _: None))
    counts = again.counts.to_dict()
    assert again.done and sum(v for k, v in counts.items() if k != "scanned_pages") == 0


def test_an_external_memory_provider_is_named_as_not_erased(world: World) -> None:
    stores = replace(world.personal, external_memory="honcho", honcho_workspace="hermes")
    report = forget(stores, AL, T0 + 100, ScanPace(sleep=lambda _: None))
    (honcho,) = [n for n in report.not_covered if "Honcho" in n]
    assert "not erased" in honcho and f"default-user-{AL.handle}" in honcho and f"coder-user-{AL.handle}" in honcho


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_the_group_scan_is_paced_and_goes_on_from_where_it_stopped(world: World) -> None:
    # Given a busy group: many rows after Al's (the in-memory Scan reads 5 items a page)
    for n in range(20):
        say(world.stores, GROUP_BO, GROUP_KEY, f"chatter {n}", T0 + 10 + n)
    say(world.stores, GROUP_AL, GROUP_KEY, "Al again, late", T0 + 40)
    clock = Clock()
    pace = ScanPace(pages_per_second=2.0, deadline=1.0, clock=lambda: clock.now, sleep=clock.sleep)
    # When the erasure may run one second
    first = forget(world.personal, AL, T0 + 100, pace)
    # Then it read two pages a second, and stopped with where to go on
    assert not first.done and first.cursor is not None and first.counts.scanned_pages == 3
    assert clock.slept == [0.5, 0.5]
    # When it goes on (its own part already done), to the end
    request = replace(ErasureRequest.ask(AL, T0, None, None), owned_done=True).progressed(first)
    rest = forget(world.personal, AL, T0 + 160, ScanPace(sleep=lambda _: None), resume=request)
    # Then both of Al's group rows are redacted, and the counts carry on
    assert rest.done and [c for c, _ in group_rows(world)].count(REDACTED) == 2
    assert rest.counts.sessions == 2 and rest.counts.redacted == 2
    assert rest.counts.scanned_pages > first.counts.scanned_pages


# -- a chat's request, carried out by the tick ----------------------------------------------------


def confirmed(requests: DynamoErasureRequests, person: Person, target: dict[str, Any] | None, now: float) -> None:
    requests.ask(ErasureRequest.ask(person, now, target, "42"))
    assert requests.confirm(person, now + 1) is not None


def test_the_tick_erases_a_confirmed_request_and_tells_the_chat(world: World) -> None:
    requests, deliveries = erasure_store(), FakeDeliveryQueue()
    target = {"platform": "telegram", "chat_id": "42", "thread_id": None}
    confirmed(requests, AL, target, T0 + 50)
    tick = erase_confirmed(requests, world.personal, deliveries, T0 + 100, ScanPace(sleep=lambda _: None))
    assert tick.to_dict() == {"erasures_finished": 1, "erasures_going_on": 0, "erasures_busy": 0}
    assert world.stores.routes.get(AL_KEY) is None and requests.get(AL) is None
    (notice,) = deliveries.bodies
    assert notice["target"] == target and notice["text"].startswith("Done: your data was deleted (2 direct sessions")
    assert str(notice["delivery_id"]).startswith("erasure-")


def test_a_long_erasure_goes_on_over_ticks(world: World) -> None:
    requests, deliveries = erasure_store(), FakeDeliveryQueue()
    confirmed(requests, AL, {"platform": "telegram", "chat_id": "42"}, T0 + 50)
    ticks = itertools.count()  # each look at the clock a second later: the deadline passes after a page
    short = ScanPace(deadline=1.5, clock=lambda: float(next(ticks)), sleep=lambda _: None)
    first = erase_confirmed(requests, world.personal, deliveries, T0 + 100, short)
    assert first.going_on == 1 and deliveries.bodies == []
    kept = requests.get(AL)
    assert kept is not None and kept.owned_done and kept.cursor and kept.counts.sessions == 2
    second = erase_confirmed(requests, world.personal, deliveries, T0 + 160, ScanPace(sleep=lambda _: None))
    assert second.finished == 1 and len(deliveries.bodies) == 1 and requests.get(AL) is None


def test_a_running_turn_defers_the_erasure_to_the_next_tick(world: World) -> None:
    requests, deliveries = erasure_store(), FakeDeliveryQueue()
    confirmed(requests, AL, {"platform": "telegram", "chat_id": "42"}, T0 + 50)
    begin(world.stores, "e-running", T0 + 99, AL_KEY)  # a turn runs in Al's DM
    tick = erase_confirmed(requests, world.personal, deliveries, T0 + 100, ScanPace(sleep=lambda _: None))
    assert tick.busy == 1 and deliveries.bodies == [] and requests.get(AL) is not None
    assert route(world.stores, AL_KEY).session_id == world.ids["al_dm"]


@pytest.mark.parametrize("check", erasure_requests.CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
def test_erasure_requests_contract_in_memory(check: Any) -> None:
    check(erasure_store())


# -- /forget in the chat ----------------------------------------------------------------------


def ask(text: str, requests: DynamoErasureRequests, now: float, source: SessionSource = AL_DM, **env: str) -> str:
    context = CommandContext(
        source, make_settings(env), now, "agent:main:telegram:dm:42", memory_stores(),
        erasures=requests, reply_to={"platform": source.platform, "chat_id": source.chat_id},
    )  # fmt: skip
    answer = answer_command(text, context)
    assert answer is not None
    return answer.reply


def test_forget_explains_and_waits_for_its_confirmation() -> None:
    requests = erasure_store()
    # When Al sends /forget
    explained = ask("/forget", requests, T0)
    # Then he is told what goes and how to confirm; nothing is confirmed yet
    assert "/forget confirm within 5 minutes" in explained and "group chats" in explained
    asked = requests.get(AL)
    assert asked is not None and asked.state == "asked" and requests.confirmed(10) == []
    assert (asked.target, asked.dm_chat) == ({"platform": "telegram", "chat_id": "42"}, "42")
    # When he confirms within the window, then the erasure is on
    assert ask("/forget confirm", requests, T0 + 60).startswith("Deleting your data now")
    assert [r.person for r in requests.confirmed(10)] == [AL]
    assert ask("/forget confirm", requests, T0 + 61).startswith("Your data is being deleted")
    assert ask("/forget", requests, T0 + 62).startswith("Your data is being deleted")


def test_a_late_confirm_or_a_cancel_deletes_nothing() -> None:
    requests = erasure_store()
    assert ask("/forget confirm", requests, T0).startswith("Nothing to confirm")
    ask("/forget", requests, T0)
    assert ask("/forget confirm", requests, T0 + 301).startswith("Nothing to confirm")
    ask("/forget", requests, T0 + 400)
    assert ask("/forget cancel", requests, T0 + 401) == "Dropped: nothing will be deleted."
    assert ask("/forget confirm", requests, T0 + 402).startswith("Nothing to confirm")
    assert requests.confirmed(10) == [] and ask("/forget now", requests, T0).startswith("Usage: /forget")


def test_anyone_may_forget_themselves_in_a_group_and_is_told_about_honcho() -> None:
    requests = erasure_store()
    explained = ask("/forget", requests, T0, GROUP_AL, GATEWAY_MEMORY_PROVIDER="honcho")
    assert "Honcho" in explained and "not erased" in explained
    assert requests.get(AL) is not None and requests.get(AL).dm_chat is None  # type: ignore[union-attr]
    assert "/forget - delete what this gateway holds about you" in ask("/help", requests, T0, GROUP_BO)


# -- export ---------------------------------------------------------------------------------------


def test_export_holds_everything_forget_would_erase_and_changes_nothing(world: World) -> None:
    exported = export_person(world.personal, AL, T0 + 100, ScanPace(sleep=lambda _: None))
    data = json.loads(json.dumps(exported.data))  # all of it is JSON
    own, coder = data["profiles"]["default"], data["profiles"]["coder"]
    assert [m["content"] for m in own["sessions"][0]["messages"]] == ["my passport is X123", "re: my passport is X123"]
    assert own["sessions"][0]["session"]["session_id"] == world.ids["al_dm"]
    assert [m["content"] for m in coder["sessions"][0]["messages"]] == ["code with me", "re: code with me"]
    assert sorted(n["text"] for n in own["memory_notes"]) == ["lives in Leeds", "prefers tea"]
    assert [a["user_id"] for a in own["pairing"]["approved"]] == ["42"] and own["pairing"]["pending"] == []
    assert sorted(u["session_key"] for u in own["usage"]["sessions_used"]) == sorted([AL_KEY, GROUP_KEY])
    assert own["usage"]["told_window"] == "messages_per_minute@1" and GROUP_KEY in own["usage"]["counters"]
    assert [j["id"] for j in own["cron_jobs"]] == ["j00000000000a", "j00000000000e"]
    assert [j["id"] for j in own["cron_jobs_made_in_groups"]] == ["j00000000000f"]
    assert [j["id"] for j in coder["cron_jobs"]] == ["j00000000000d"]
    # his own group message, not Bo's nor the bot's
    assert [(m["session_id"], m["content"]) for m in data["messages_in_groups"]] == [
        (world.ids["group"], "my address is 1 Elm St")
    ]
    dm, group = world.ids["al_dm"], world.ids["group"]
    assert sorted(exported.media_keys) == sorted([
        f"default/{dm}/1-0", f"default/{dm}/1-0.json", f"default/{dm}/out/d1-0",
        f"default/{group}/1-0", f"default/{group}/1-0.json",
    ])  # fmt: skip
    assert "X123" not in json.dumps(data["not_covered"])
    # nothing was changed by reading
    assert world.stores.routes.get(AL_KEY) is not None and len(world.media.objects) == 8
