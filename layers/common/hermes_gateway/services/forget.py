"""Forget a person (BEHAVIOUR §11): their data in every profile of the deployment, erased.

Two parts, each safe to run again:
1. what is theirs alone (`erase_owned`): per profile, their DM sessions (files first, then the
   route, rows, title and record), usage counters and records, memory notes and pairing records;
   then the cron jobs they made in their DM (deleted) and in groups (kept for the group, their
   name taken off). Bounded by how much they said.
2. their rows in group sessions (`erase_group_rows`): the messages table read page by page, at
   most `ScanPace.pages_per_second` pages (of 1 MB) a second, every row marked with their handle
   redacted and its files deleted. Bounded by the table, so it may stop at a deadline and go on
   from its cursor (the every-minute tick carries a chat's `/forget` over as many ticks as it
   takes; the CLI runs it to the end).

`hermes-gateway users forget` calls `forget` directly; a chat's `/forget confirm` is carried out
by `erase_confirmed` in the expiry tick, which tells the chat when it is done.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from hermes_gateway.domain.cron import Job, JobStore
from hermes_gateway.domain.limits import UsageBook
from hermes_gateway.domain.pairing import PairingStore
from hermes_gateway.domain.ports import Deliveries, ErasableMedia, PersonalData, SenderPage
from hermes_gateway.domain.privacy import (
    DM_CHAT_IS_USER,
    LEGACY_NOTE,
    REDACTED,
    ErasureCounts,
    ErasureReport,
    ErasureRequest,
    ErasureRequests,
    Person,
    ProfileScope,
    erasure_done_notice,
    external_memory_note,
    record_keys,
)
from hermes_gateway.domain.sessions import SessionInfo
from hermes_gateway.domain.source import user_handle
from hermes_gateway.errors import SessionBusy
from hermes_gateway.observability import hash_id, logger
from hermes_gateway.settings import Settings
from hermes_gateway.tools.memory import NoteStore

PAGES_PER_SECOND = 4.0  # 4 MB of the messages table a second: 512 read units a second at most


def profile_scopes(settings: Settings) -> tuple[ProfileScope, ...]:
    """Every profile the deployment serves, as a person's data is filed under it."""
    return tuple(ProfileScope(p.profile, p.served_profile) for p in settings.all_profiles())


@dataclass(frozen=True)
class PersonalStores:
    """Where one person's data is: the session tables, memory notes, pairing (the store itself:
    each profile's platforms are scoped by its `ProfileScope`), cron jobs and the media bucket,
    for every profile the deployment serves."""

    scopes: tuple[ProfileScope, ...]
    data: PersonalData
    notes: NoteStore
    pairing: PairingStore
    jobs: JobStore | None = None
    media: ErasableMedia | None = None
    usage: UsageBook | None = None  # the limits' counters and records (domain/limits.py)
    external_memory: str = ""  # `memory.external` (honcho: not erasable from here)
    honcho_workspace: str = ""

    def sessions_of(self, scope: ProfileScope, person: Person) -> list[SessionInfo]:
        """The person's DM sessions in one profile (and, where the DM chat is the user, those
        from before sessions carried their reach)."""
        found = self.data.sessions_reached(scope.dm_reach(person))
        legacy = scope.legacy_dm_key(person)
        if legacy is not None:
            found += self.data.unreached_sessions_keyed(legacy)
        return found

    def jobs_of(self, scope: ProfileScope, person: Person, chats: set[str]) -> tuple[list[Job], list[Job]]:
        """The profile's cron jobs the person made: those made in their DM (theirs), and those
        made in a group (the group's, which keep running without their name). A job from before
        jobs kept their creator is theirs when it was made in one of their DM chats (`chats`, and
        their own id where a DM's chat is the user)."""
        if self.jobs is None:
            return [], []
        own_chats = chats | (set(person.ids) if person.platform in DM_CHAT_IS_USER else set())
        theirs: list[Job] = []
        in_groups: list[Job] = []
        for job in self.jobs.list(scope.profile):
            creator, origin = job.creator or {}, job.origin or {}
            if creator:
                made_by = user_handle(
                    str(creator.get("platform") or ""), creator.get("user_id_alt") or creator.get("user_id")
                )
                if made_by == person.handle:
                    (theirs if creator.get("chat_type", "dm") == "dm" else in_groups).append(job)
            elif origin.get("platform") == person.platform and str(origin.get("chat_id")) in own_chats:
                theirs.append(job)
        return theirs, in_groups

    def not_covered(self, person: Person) -> list[str]:
        """What the erasure or export cannot cover, said plainly."""
        note = external_memory_note(self.external_memory, self.honcho_workspace, list(self.scopes), person)
        return [LEGACY_NOTE, *([note] if note else [])]


@dataclass(frozen=True)
class ScanPace:
    """How fast the messages table is read, and until when (`deadline`, on `clock`; None: to the end)."""

    pages_per_second: float = PAGES_PER_SECOND
    deadline: float | None = None
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep

    def over(self) -> bool:
        return self.deadline is not None and self.clock() >= self.deadline


def erase_owned(stores: PersonalStores, person: Person, now: float, *, dm_chats: tuple[str, ...] = ()) -> ErasureCounts:
    """Part 1: what is the person's alone, in every profile. SessionBusy while a turn runs in one
    of their DM sessions (nothing of that session is deleted; run it again)."""
    counts = ErasureCounts()
    chats, media = set(dm_chats), stores.media
    for scope in stores.scopes:
        for session in stores.sessions_of(scope, person):
            # The session's own files first: a crash later leaves its record, found again next time.
            own = media.keys(scope.session_prefix(session.session_id)) if media is not None else []
            if media is not None and own:
                counts.files += media.delete(own)
            erased = stores.data.erase_session(session.session_id, now)
            # a row copied from another session (a compressed parent's) names that session's files
            elsewhere = [k for k in record_keys(erased.media_keys) if k not in set(own)]
            if media is not None and elsewhere:
                counts.files += media.delete(elsewhere)
            counts.sessions += 1
            counts.rows += erased.rows
            if erased.chat_id:
                chats.add(erased.chat_id)
    for scope in stores.scopes:
        owner = scope.usage_owner(person)
        if stores.usage is not None and owner is not None:
            counts.usage += stores.usage.forget(owner)
        counts.notes += stores.notes.clear(scope.memory_scope(person))
        counts.pairings += sum(stores.pairing.forget_user(scope.pairing_platform(person), uid) for uid in person.ids)
        theirs, in_groups = stores.jobs_of(scope, person, chats)
        if stores.jobs is not None:
            counts.jobs += sum(stores.jobs.remove(job.id) for job in theirs)
            counts.group_jobs += sum(stores.jobs.disown(job.id) for job in in_groups)
    return counts


def sender_pages(stores: PersonalStores, person: Person, cursor: str | None, pace: ScanPace) -> Iterator[SenderPage]:
    """The Scan's pages of the person's rows from `cursor`, at most `pace.pages_per_second`; it
    stops after the table's last page, or after a page read once the deadline is past."""
    while True:
        started = pace.clock()
        page = stores.data.sender_rows(person.handle, cursor)
        yield page
        if page.cursor is None or pace.over():
            return
        cursor = page.cursor
        pace.sleep(max(0.0, 1.0 / pace.pages_per_second - (pace.clock() - started)))


def erase_group_rows(
    stores: PersonalStores, person: Person, cursor: str | None, pace: ScanPace
) -> tuple[ErasureCounts, str | None, bool]:
    """Part 2: the person's rows elsewhere, redacted (their files deleted first), from `cursor`;
    the counts, where to go on, and whether the table was read to its end."""
    counts = ErasureCounts()
    for page in sender_pages(stores, person, cursor, pace):
        counts.scanned_pages += 1
        for found in page.rows:
            keys = record_keys([a.key for a in found.row.attachments if a.key])
            if stores.media is not None and keys:
                counts.files += stores.media.delete(keys)
            counts.redacted += int(stores.data.redact(found.session_id, found.row.seq, person.handle, REDACTED))
        cursor = page.cursor
    return counts, cursor, cursor is None


def forget(
    stores: PersonalStores,
    person: Person,
    now: float,
    pace: ScanPace,
    *,
    dm_chats: tuple[str, ...] = (),
    resume: ErasureRequest | None = None,
) -> ErasureReport:
    """Erase the person's data; a `resume`d erasure goes on where its last run stopped."""
    report = ErasureReport(counts=ErasureCounts.from_dict(resume.counts.to_dict()) if resume else ErasureCounts())
    if resume is None or not resume.owned_done:
        report.counts.add(erase_owned(stores, person, now, dm_chats=dm_chats))
    group, report.cursor, report.done = erase_group_rows(stores, person, resume.cursor if resume else None, pace)
    report.counts.add(group)
    report.not_covered = stores.not_covered(person)
    logger.info(
        "erasure ran",
        extra={"platform": person.platform, "user": hash_id(person.user_id), "done": report.done,
               **report.counts.to_dict()},
    )  # fmt: skip
    return report


@dataclass
class ErasureTick:
    """What one tick did with the chats' confirmed erasures."""

    finished: int = 0
    going_on: int = 0  # stopped at the deadline; the next tick goes on
    busy: int = 0  # a turn was running in one of the person's sessions; the next tick tries again

    def to_dict(self) -> dict[str, int]:
        return {"erasures_finished": self.finished, "erasures_going_on": self.going_on, "erasures_busy": self.busy}


def erase_confirmed(
    requests: ErasureRequests,
    stores: PersonalStores,
    deliveries: Deliveries | None,
    now: float,
    pace: ScanPace,
    limit: int = 10,
) -> ErasureTick:
    """The expiry tick's part: each confirmed `/forget`, as far as the deadline allows; a
    finished one is told in the chat that asked and its request removed."""
    tick = ErasureTick()
    for request in requests.confirmed(limit):
        if pace.over():
            break
        dm_chats = (request.dm_chat,) if request.dm_chat else ()
        try:
            report = forget(stores, request.person, now, pace, dm_chats=dm_chats, resume=request)
        except SessionBusy:
            tick.busy += 1
            continue
        if not report.done:
            requests.save(request.progressed(report))
            tick.going_on += 1
            continue
        if deliveries is not None and request.target:
            deliveries.send(_notice_job(request, report))
        requests.finish(request)
        tick.finished += 1
    return tick


def _notice_job(request: ErasureRequest, report: ErasureReport) -> dict[str, object]:
    """The chat's notice that the erasure is done; its id is the request's, so a repeated tick
    (the request finished after the notice was handed over) sends it once (the outbox)."""
    mark = f"{request.person.label}|{request.confirmed_at}"
    return {
        "delivery_id": "erasure-" + hashlib.sha256(mark.encode()).hexdigest()[:32],
        "target": request.target or {},
        "text": erasure_done_notice(report),
        "redact": [],
    }
