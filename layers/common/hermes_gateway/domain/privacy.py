"""A person's data on request (BEHAVIOUR §11): who they are to each store, and forget's rules.

`/forget` in a chat (confirmed within `CONFIRM_SECONDS` by `/forget confirm`) and
`hermes-gateway users forget <platform>:<user id>` erase one person's data in every profile of
the deployment; `hermes-gateway users export` writes it out. The same person is found in each
store by a key this module derives, never by anything the model wrote:

- sessions and transcripts: their DM sessions, whose `reach` is `<namespace>|dm|<platform>|<id>`
  (the `by_reach` index, per profile); a DM session from before `reach` existed by its key, where a
  DM's chat id is the user's own (`DM_CHAT_IS_USER`);
- their own rows in group sessions (`sender` = their handle): a bounded-rate Scan of the messages
  table;
- the media bucket: the files their rows name and their sessions' prefixes, with the `.json`
  records beside the files;
- memory: the notes of scope `<profile>#<handle>`;
- access: approvals, pending codes and request windows of their id (`<platform>[@<profile>]`),
  and their usage records (`usage#<platform>[@<profile>]#<id>`: the sessions whose routes carry
  their usage counters, which go too);
- jobs: the cron jobs they made (the job's `creator`; before jobs kept one, a job whose origin
  is their DM chat): made in their DM, deleted; made in a group, the group's, kept without their
  name (its runs then stand for no one).

Group sessions are the group's: the person's own rows there are redacted (text replaced with
`REDACTED`, attachments and their files removed, their name and handle taken off the row), the
others' rows and the bot's answers stay. A job made in a group is the group's and stays too.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Protocol

from hermes_gateway.domain.limits import Owner, spender_id, spender_key
from hermes_gateway.domain.reach import session_reach
from hermes_gateway.domain.session_key import build_session_key, key_namespace
from hermes_gateway.domain.source import SessionSource, user_handle
from hermes_gateway.errors import BadRequest

CONFIRM_SECONDS = 300  # `/forget confirm` must follow `/forget` within this long
REDACTED = "[removed at the sender's request]"
# Platforms whose DM chat id is the user's own id, so a DM session written before sessions carried
# their `reach` still has the user in its key (Telegram's private chat, a WhatsApp number, LINE's
# one-to-one chat, an SMS number). Elsewhere a DM's chat id is the conversation's own.
DM_CHAT_IS_USER = frozenset({"telegram", "whatsapp", "line", "sms"})


@dataclass(frozen=True)
class Person:
    """Whom a request is about: a platform and the id the gateway keys them by (`user_id_alt`
    where the platform has one: Teams' AAD object id, Feishu's union id; else the user id)."""

    platform: str
    user_id: str
    other_ids: tuple[str, ...] = ()  # the same person's other id on the platform (a chat's `user_id`)

    @classmethod
    def parse(cls, text: str, platforms: tuple[str, ...] = ()) -> Person:
        """`<platform>:<user id>` as an operator types it; the id keeps its case and any `:`."""
        platform, sep, user_id = text.strip().partition(":")
        platform = platform.strip().lower()
        if not sep or not platform or not user_id.strip():
            raise BadRequest("name the user as <platform>:<user id>, e.g. telegram:123456789")
        if platforms and platform not in platforms:
            raise BadRequest(f"unknown platform {platform!r} (one of: {', '.join(platforms)})")
        return cls(platform, user_id.strip())

    @classmethod
    def of(cls, source: SessionSource) -> Person:
        """The sender of a chat message (who runs `/forget`)."""
        keyed = source.user_id_alt or source.user_id
        if not keyed:
            raise BadRequest("this message has no sender to forget")
        others = tuple(i for i in (source.user_id,) if i and i != keyed)
        return cls(source.platform, keyed, others)

    @property
    def label(self) -> str:
        return f"{self.platform}:{self.user_id}"

    @property
    def ids(self) -> tuple[str, ...]:
        return (self.user_id, *self.other_ids)

    @property
    def handle(self) -> str:
        """The mark on their transcript rows and their memory's scope (`domain.source.user_handle`)."""
        found = user_handle(self.platform, self.user_id)
        assert found is not None  # a Person always has an id
        return found


@dataclass(frozen=True)
class ProfileScope:
    """One profile as a person's data is filed under it: `profile` (its name, as memory scopes
    and jobs carry it) and `served` (None for the deployment's own, the name for a named one, as
    pairing and the media bucket's keys carry it)."""

    profile: str
    served: str | None = None

    @property
    def namespace(self) -> str:
        return key_namespace(self.profile)

    @property
    def media_prefix(self) -> str:
        return self.served or "default"

    def dm_reach(self, person: Person) -> str:
        return session_reach(self.namespace, SessionSource(person.platform, chat_type="dm", user_id=person.user_id))

    def legacy_dm_key(self, person: Person) -> str | None:
        """The key of their DM where the platform's DM chat is the user (DM_CHAT_IS_USER)."""
        if person.platform not in DM_CHAT_IS_USER:
            return None
        source = SessionSource(person.platform, chat_id=person.user_id, chat_type="dm", user_id=person.user_id)
        return build_session_key(source, profile=self.profile)

    def memory_scope(self, person: Person) -> str:
        return f"{self.profile}#{person.handle}"

    def pairing_platform(self, person: Person) -> str:
        """The platform as this profile's pairing data is stored under it (`domain.profiles`)."""
        return f"{person.platform}@{self.served}" if self.served else person.platform

    def usage_owner(self, person: Person) -> Owner | None:
        """Whose usage counters they are in this profile (domain/limits.py)."""
        source = SessionSource(person.platform, user_id=person.user_id, profile=self.served)
        user, spender = spender_id(source), spender_key(source)
        return Owner(self.pairing_platform(person), user, spender) if user and spender else None

    def session_prefix(self, session_id: str) -> str:
        """Where a session's files are in the media bucket (inbound, their records, outbound copies)."""
        return f"{self.media_prefix}/{session_id}/"


def record_keys(keys: list[str] | tuple[str, ...]) -> list[str]:
    """Each stored attachment and the record of what was made of it (`<key>.json`)."""
    return [k for key in keys for k in (key, f"{key}.json")]


@dataclass
class ErasureCounts:
    """What an erasure removed, counted as it goes (a resumed erasure adds to it)."""

    sessions: int = 0  # DM sessions deleted (record, route, rows)
    rows: int = 0  # their rows deleted
    redacted: int = 0  # their rows in group sessions redacted
    files: int = 0  # media objects deleted (files and their records)
    notes: int = 0  # memory notes
    pairings: int = 0  # approvals, pending codes and request windows
    usage: int = 0  # usage records (limits, /usage): the routes their counters were on, their own records
    jobs: int = 0  # cron jobs they made in their DM: deleted
    group_jobs: int = 0  # cron jobs they made in a group: kept for it, without their name
    scanned_pages: int = 0  # pages of the messages table's Scan read

    def add(self, other: ErasureCounts) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def to_dict(self) -> dict[str, int]:
        return {f.name: int(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> ErasureCounts:
        names = {f.name for f in fields(cls)}
        return cls(**{k: int(v) for k, v in (data or {}).items() if k in names})


@dataclass
class ErasureReport:
    counts: ErasureCounts = field(default_factory=ErasureCounts)
    done: bool = False  # False: the messages table's Scan stopped at its budget and goes on later
    cursor: str | None = None  # where the Scan goes on
    not_covered: list[str] = field(default_factory=list)  # what could not be erased here, said plainly

    def summary(self) -> str:
        c = self.counts
        return (
            f"{c.sessions} direct sessions ({c.rows} messages), {c.redacted} group messages redacted, "
            f"{c.files} stored files, {c.notes} memory notes, {c.pairings} pairing records, {c.usage} usage records, "
            f"{c.jobs} cron jobs"
            + (f" ({c.group_jobs} made in groups kept for them, without your name)" if c.group_jobs else "")
        )


LEGACY_NOTE = (
    "Messages written before this release carry no sender mark: in group chats they are not found. "
    "Direct sessions from before it are found only where a direct chat's id is the user's own "
    f"({', '.join(sorted(DM_CHAT_IS_USER))})."
)


def external_memory_note(provider: str, workspace: str, scopes: list[ProfileScope], person: Person) -> str | None:
    """What an external memory provider keeps that the gateway cannot erase (None: no provider)."""
    if provider != "honcho":
        return None
    peers = ", ".join(f"{s.profile}-user-{person.handle}" for s in scopes)
    return (
        f"Honcho (memory.external) is not erased from here: delete the peer(s) {peers} "
        f"in workspace {workspace!r} in Honcho itself."
    )


def forget_explanation(person: Person, *, external_memory: bool) -> str:
    """What `/forget` tells the user before they confirm."""
    lines = [
        f"This deletes what this gateway holds about you ({person.label}), with every bot of this deployment:",
        "- your direct conversations with me, their messages and files;",
        "- your own messages in group chats (replaced with a note; the others' messages stay);",
        "- what I remember about you, your usage counts, reminders you set up in a direct chat (those you set "
        "up in a group stay for the group, without your name), and your pairing (you would need a new code).",
        "It cannot be undone. Send /forget confirm within 5 minutes to go ahead (/forget cancel to drop it).",
    ]
    if external_memory:
        lines.append(
            "The external memory service (Honcho) is not erased this way: ask the operator of this bot for that."
        )
    return "\n".join(lines)


def erasure_done_notice(report: ErasureReport) -> str:
    """The chat's notice once an erasure it asked for is complete."""
    return f"Done: your data was deleted ({report.summary()})."


ASKED = "asked"  # `/forget` was answered with the explanation; waiting for `/forget confirm`
CONFIRMED = "confirmed"  # the tick erases it (over several ticks when the Scan is long)


@dataclass(frozen=True)
class ErasureRequest:
    """A chat's `/forget`, from the ask to the erasure's end. `target` is where the chat's answer
    and the end's notice go (a delivery target); `dm_chat` the chat id when it was asked in a DM
    (the jobs made there are the user's). Progress is kept on it between ticks: what was erased
    so far, whether the person's own data is done (`owned_done`) and where the Scan goes on."""

    person: Person
    state: str
    asked_at: float
    confirm_by: float
    target: dict[str, Any] | None = None
    dm_chat: str | None = None
    confirmed_at: float | None = None
    owned_done: bool = False
    cursor: str | None = None
    counts: ErasureCounts = field(default_factory=ErasureCounts)

    @classmethod
    def ask(cls, person: Person, now: float, target: dict[str, Any] | None, dm_chat: str | None) -> ErasureRequest:
        return cls(person, ASKED, now, now + CONFIRM_SECONDS, target, dm_chat)

    def confirmable(self, now: float) -> bool:
        return self.state == ASKED and now < self.confirm_by

    def confirmed(self, now: float) -> ErasureRequest:
        return replace(self, state=CONFIRMED, confirmed_at=now)

    def progressed(self, report: ErasureReport) -> ErasureRequest:
        return replace(self, owned_done=True, cursor=report.cursor, counts=report.counts)


class ErasureRequests(Protocol):
    """The chats' `/forget` requests (the access table): asked, confirmed, erased by the tick."""

    def ask(self, request: ErasureRequest) -> ErasureRequest:
        """Record a new ask for its person (replacing an unconfirmed one); a confirmed erasure
        of the person is returned instead, unchanged."""
        ...

    def confirm(self, person: Person, now: float) -> ErasureRequest | None:
        """The person's ask, confirmed in one conditional write while it is confirmable; None
        when there is no such ask (none, past its time, or confirmed already)."""
        ...

    def cancel(self, person: Person) -> bool:
        """Drop the person's unconfirmed ask."""
        ...

    def get(self, person: Person) -> ErasureRequest | None: ...

    def confirmed(self, limit: int) -> list[ErasureRequest]:
        """Confirmed erasures not yet finished, oldest first (one read of one partition)."""
        ...

    def save(self, request: ErasureRequest) -> None:
        """Keep a confirmed erasure's progress."""
        ...

    def finish(self, request: ErasureRequest) -> None:
        """The erasure is complete: the request (the person's id in it) goes too."""
        ...
