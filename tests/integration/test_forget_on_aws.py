"""Forget and export on the AWS adapters (moto): the erasure requests on the access table, the
media bucket's listing and deletes, the memory and pairing erasures, the messages table's Scan
over real 1 MB pages, and one whole erasure of a person across DynamoDB and S3 (BEHAVIOUR §11).
Each store is held to the same checks as its in-memory fake."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import boto3
import pytest

from hermes_gateway import wiring
from hermes_gateway.adapters.dynamo_access import DynamoAccessStore
from hermes_gateway.adapters.dynamo_erasures import DynamoErasureRequests
from hermes_gateway.adapters.dynamo_jobs import DynamoJobStore
from hermes_gateway.adapters.dynamo_memory import DynamoNoteStore
from hermes_gateway.adapters.s3_media import S3MediaStore
from hermes_gateway.domain import pairing
from hermes_gateway.domain.cron import Job
from hermes_gateway.domain.privacy import REDACTED, Person, ProfileScope
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.resources import MEDIA
from hermes_gateway.services.forget import ScanPace, forget
from tests.contracts import erasure_requests
from tests.contracts.personal_data import GROUP_AL, GROUP_BO, GROUP_KEY, say
from tests.fakes.access import FakePairingStore
from tests.fakes.jobs import FakeJobStore
from tests.fakes.media_store import MemoryMedia
from tests.fakes.memory_notes import FakeNoteStore
from tests.integration.conftest import REGION, Aws

pytestmark = pytest.mark.integration

T0 = 1_800_000_000.0
AL = Person("telegram", "42")


@pytest.mark.parametrize("check", erasure_requests.CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
def test_erasure_requests_contract_on_dynamodb(check: Any, aws: Aws) -> None:
    check(DynamoErasureRequests(aws.bindings, REGION))


def _bucket(aws: Aws) -> S3MediaStore:
    return S3MediaStore(aws.bindings.bucket(MEDIA.name), REGION)


@pytest.mark.parametrize("make", [_bucket, lambda aws: MemoryMedia()], ids=["s3", "memory"])
def test_a_sessions_files_are_listed_by_prefix_and_deleted(make: Callable[[Aws], Any], aws: Aws) -> None:
    media = make(aws)
    session_files = [f"default/s1/{n}-0" for n in range(1005)]  # more than one page of each call
    for key in (*session_files, "default/s1/1-0.json", "default/s10/1-0", "default/s2/1-0"):
        media.put(key, b"x", "image/jpeg")
    listed = media.keys("default/s1/")
    assert sorted(listed) == sorted([*session_files, "default/s1/1-0.json"])
    assert media.delete([*listed, "default/s1/never-stored", listed[0]]) == len(listed) + 1
    assert media.keys("default/s1/") == [] and media.get("default/s1/1-0") is None
    assert sorted(media.keys("default/")) == ["default/s10/1-0", "default/s2/1-0"]


@pytest.mark.parametrize("make", [lambda aws: DynamoNoteStore(aws.bindings, REGION), lambda aws: FakeNoteStore()],
                         ids=["dynamodb", "memory"])  # fmt: skip
def test_clearing_a_scope_deletes_its_notes_and_its_count(make: Callable[[Aws], Any], aws: Aws) -> None:
    notes = make(aws)
    for n in range(3):
        notes.add_note("default#al", f"n{n}", f"note {n}", T0, max_notes=3)
    notes.add_note("default#bo", "n0", "Bo's", T0, max_notes=3)
    assert notes.clear("default#al") == 3 and notes.clear("default#al") == 0
    assert notes.list_notes("default#al") == [] and [n.text for n in notes.list_notes("default#bo")] == ["Bo's"]
    for n in range(3):  # the count went too: the scope holds its full number again
        notes.add_note("default#al", f"m{n}", "again", T0, max_notes=3)


@pytest.mark.parametrize("make", [lambda aws: DynamoAccessStore(aws.bindings), lambda aws: FakePairingStore()],
                         ids=["dynamodb", "memory"])  # fmt: skip
def test_forgetting_a_user_deletes_their_approval_code_and_window(
    make: Callable[[Aws], Any], aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pairing, "HASH_ITERATIONS", 1)
    store = make(aws)
    first = store.request_code("telegram", "42", "Al", "42", T0)
    store.approve("telegram", first.code, T0 + 1, "cli:op")
    assert store.request_code("telegram", "42", "Al", "42", T0 + 700).status == "issued"  # pending again
    store.request_code("telegram", "43", "Bo", "43", T0 + 2)
    assert store.request_code("telegram", "42", "Al", "42", T0 + 701).status == "rate_limited"
    # When Al is forgotten: his approval, his pending code and his request window go
    assert store.forget_user("telegram", "42") == 3
    assert not store.is_approved("telegram", "42")
    assert [p.user_id for p in store.pending("telegram", T0 + 702)] == ["43"]
    assert store.request_code("telegram", "42", "Al", "42", T0 + 702).status == "issued"  # no window left
    assert store.forget_user("telegram@coder", "42") == 0


def test_the_scan_reads_the_messages_table_in_pages_and_redacts_a_compressed_row(aws: Aws) -> None:
    # Given more than 1 MB of rows (a Scan page is 1 MB) with Al's rows at both ends
    stores = wiring.session_stores()
    say(stores, GROUP_AL, GROUP_KEY, "Al first " * 200, T0)  # a long row: stored compressed
    group = stores.routes.get(GROUP_KEY)
    assert group is not None
    client = boto3.client("dynamodb", region_name=REGION)
    table = aws.bindings.table("messages")
    padding = "x" * 4000
    for n in range(300):
        client.put_item(TableName=table, Item={"session_id": {"S": f"other-{n}"}, "seq": {"N": "1"},
                                               "role": {"S": "user"}, "content": {"S": padding}})  # fmt: skip
    say(stores, GROUP_BO, GROUP_KEY, "Bo here", T0 + 1)
    say(stores, GROUP_AL, GROUP_KEY, "Al last", T0 + 2)
    # When the person's rows are read page by page
    pages, cursor, found = 0, None, []
    while True:
        page = stores.personal.sender_rows(AL.handle, cursor)
        pages, cursor, found = pages + 1, page.cursor, found + page.rows
        if cursor is None:
            break
    # Then every page was read and both rows found, whole
    assert pages >= 2 and sorted(r.row.content[:9] for r in found) == ["Al first ", "Al last"]
    long_row = next(r for r in found if r.row.content.startswith("Al first"))
    assert stores.personal.redact(long_row.session_id, long_row.row.seq, AL.handle, REDACTED)
    item = client.get_item(TableName=table, Key={"session_id": {"S": group.session_id}, "seq": {"N": "1"}})["Item"]
    assert item["content"]["S"] == REDACTED and "content_z" not in item and "sender" not in item


def test_a_person_is_forgotten_across_dynamodb_and_s3(aws: Aws) -> None:
    # Given Al's DM with a photo, his note and pairing, and a group with his photo and Bo's message
    stores = wiring.personal_stores_on(aws.bindings, wiring.settings(), REGION)
    sessions = wiring.session_stores()
    dm_source = SessionSource(platform="telegram", chat_id="42", chat_type="dm", user_id="42", user_name="Al")
    dm_key = "agent:main:telegram:dm:42"
    dm = sessions.routes.open(dm_source, dm_key, T0).session_id
    say(sessions, dm_source, dm_key, "my photo", T0 + 1, f"default/{dm}/1-0")
    say(sessions, GROUP_AL, GROUP_KEY, "group photo", T0 + 2, "default/g/1-0")
    say(sessions, GROUP_BO, GROUP_KEY, "Bo here", T0 + 3)
    media = stores.media
    assert media is not None
    for key in (f"default/{dm}/1-0", f"default/{dm}/1-0.json", "default/g/1-0", "default/g/1-0.json", "default/g/3-0"):
        media.put(key, b"bytes", "image/jpeg")
    stores.notes.add_note(ProfileScope("default").memory_scope(AL), "n", "likes tea", T0, 10)
    # When he is forgotten
    report = forget(stores, AL, T0 + 10, ScanPace(sleep=lambda _: None))
    # Then DynamoDB and S3 hold nothing of his but the redacted group row
    assert report.done and (report.counts.sessions, report.counts.redacted, report.counts.files) == (1, 1, 4)
    assert sessions.routes.get(dm_key) is None and stores.data.transcript(dm) == []
    assert media.keys("default/") == ["default/g/3-0"]
    assert stores.notes.list_notes(ProfileScope("default").memory_scope(AL)) == []
    group = sessions.routes.get(GROUP_KEY)
    assert group is not None
    assert [r.content for r in stores.data.transcript(group.session_id) if r.role == "user"] == [REDACTED, "Bo here"]


def test_the_messages_tables_ttl_is_the_attribute_rows_carry(aws: Aws) -> None:
    ttl = boto3.client("dynamodb", region_name=REGION).describe_time_to_live(TableName=aws.bindings.table("messages"))
    assert ttl["TimeToLiveDescription"]["AttributeName"] == "expires_at"


@pytest.mark.parametrize("make", [lambda aws: DynamoJobStore(aws.bindings), lambda aws: FakeJobStore()],
                         ids=["dynamodb", "memory"])  # fmt: skip
def test_a_job_is_disowned_and_keeps_running(make: Callable[[Aws], Any], aws: Aws) -> None:
    jobs = make(aws)
    creator = {"platform": "telegram", "chat_id": "-100", "chat_type": "group", "user_id": "42"}
    job = Job("j0000000000a1", "standup", "remind the team", "every 1d", ("origin",),
              {"platform": "telegram", "chat_id": "-100"}, T0, T0 + 86_400, creator=creator)  # fmt: skip
    jobs.create(job)
    assert jobs.disown(job.id) and not jobs.disown("j0000000000ff")
    kept = jobs.get(job.id)
    assert kept is not None and kept.creator is None
    assert (kept.prompt, kept.state, kept.next_run_at) == ("remind the team", job.state, job.next_run_at)


@pytest.mark.parametrize(("retention_days", "kept_days"), [("0", 30), ("7", 7), ("90", 30)])
def test_an_outbox_row_goes_no_later_than_the_retention(
    retention_days: str, kept_days: int, aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A reply's row holds its text (a preview): it is kept 30 days, or the retention when shorter
    monkeypatch.setenv("GATEWAY_SESSIONS_RETENTION_DAYS", retention_days)
    wiring.reset()
    wiring.outbox().record_claimed("t#1", platform="telegram", chat_id="42", thread_id=None, text="a reply",
                                   turn_id="t", chunk=1, chunks=1, now=T0)  # fmt: skip
    item = boto3.client("dynamodb", region_name=REGION).get_item(
        TableName=aws.bindings.table("outbox"), Key={"delivery_id": {"S": "t#1"}}
    )["Item"]
    assert int(item["expires_at"]["N"]) == int(T0) + kept_days * 86_400
