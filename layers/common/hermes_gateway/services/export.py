"""What the gateway holds about one person, for `hermes-gateway users export` (BEHAVIOUR §11).

The same places forget erases (services/forget.py), read instead: per profile their DM sessions
(records and every row, undone ones too), memory notes, pairing records (never a code), usage
counters and records, and the cron jobs they made; their rows in group sessions (the paced Scan of the messages
table); and the keys of every stored file of theirs with its `.json` record, for the caller to
copy out of the media bucket.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from hermes_gateway.domain.privacy import Person, record_keys
from hermes_gateway.domain.sessions import TranscriptRow
from hermes_gateway.services.forget import PersonalStores, ScanPace, sender_pages


@dataclass
class PersonExport:
    data: dict[str, Any]  # JSON: the person's records
    media_keys: list[str] = field(default_factory=list)  # the media bucket's keys of their files


def row_json(row: TranscriptRow) -> dict[str, Any]:
    found = dataclasses.asdict(row)
    found.pop("sender", None)  # the handle is the gateway's mark, not the person's data
    found["attachments"] = [a.to_dict() for a in row.attachments]
    return found


def export_person(stores: PersonalStores, person: Person, now: float, pace: ScanPace) -> PersonExport:
    keys: list[str] = []
    profiles: dict[str, Any] = {}
    own: set[str] = set()  # their DM sessions, exported whole
    for scope in stores.scopes:
        sessions, chats = [], set()
        for info in stores.sessions_of(scope, person):
            own.add(info.session_id)
            rows = stores.data.transcript(info.session_id)
            sessions.append({"session": dataclasses.asdict(info), "messages": [row_json(r) for r in rows]})
            if stores.media is not None:
                keys += stores.media.keys(scope.session_prefix(info.session_id))
            keys += record_keys([a.key for r in rows for a in r.attachments if a.key])
            chat = stores.data.chat_of(info.session_key)
            if chat:
                chats.add(chat)
        platform = scope.pairing_platform(person)
        theirs, in_groups = stores.jobs_of(scope, person, chats)
        owner = scope.usage_owner(person)
        profiles[scope.profile] = {
            "sessions": sessions,
            "memory_notes": [dataclasses.asdict(n) for n in stores.notes.list_notes(scope.memory_scope(person))],
            "pairing": {
                "approved": [
                    dataclasses.asdict(a) for a in stores.pairing.approved(platform) if a.user_id in person.ids
                ],
                "pending": [
                    dataclasses.asdict(p) for p in stores.pairing.pending(platform, now) if p.user_id in person.ids
                ],
            },
            "usage": stores.usage.held(owner) if stores.usage is not None and owner is not None else None,
            "cron_jobs": [job.to_dict() for job in theirs],
            "cron_jobs_made_in_groups": [job.to_dict() for job in in_groups],
        }
    group_messages = []
    for page in sender_pages(stores, person, None, pace):
        for found in page.rows:
            if found.session_id not in own:
                group_messages.append({"session_id": found.session_id, **row_json(found.row)})
                keys += record_keys([a.key for a in found.row.attachments if a.key])
    data = {
        "person": {"platform": person.platform, "user_id": person.user_id},
        "exported_at": datetime.fromtimestamp(now, UTC).isoformat(),
        "profiles": profiles,
        "messages_in_groups": group_messages,  # their own rows in group sessions (the group's are not theirs)
        "not_covered": stores.not_covered(person),
    }
    return PersonExport(data, list(dict.fromkeys(keys)))
