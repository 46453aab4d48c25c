"""A user's data on request (BEHAVIOUR §11), through local mode as a user and an operator meet it.

Al chats with the bot in a DM (a note to remember, a reminder, a photo) and in a group where Bo
talks too (Al with a photo); he sends `/forget`, then `/forget confirm`; the every-minute tick
erases his data and tells him. Then the operator exports and forgets Bo with
`hermes-gateway users export|forget --local`, as they would type it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes_cli import main as cli
from hermes_gateway import wiring
from hermes_gateway.domain.privacy import REDACTED, Person, ProfileScope
from hermes_gateway.resources import MEDIA
from tests.e2e.conftest import Client
from tests.fakes.media_server import MediaTelegram

pytestmark = pytest.mark.e2e

PHOTO = b"\xff\xd8\xff\xe0" + bytes(range(256)) * 8 + b"\xff\xd9"
GROUP = -1001234
AL, BO = Person("telegram", "42"), Person("telegram", "43")
MAIN = ProfileScope("default")


@pytest.fixture
def telegram() -> Iterator[MediaTelegram]:
    fake = MediaTelegram()
    fake.start()
    yield fake
    fake.stop()


@pytest.fixture
def client(start_gateway: Callable[..., Client], telegram: MediaTelegram, tmp_path: Path) -> Client:
    return start_gateway(
        GATEWAY_ALLOW_ALL_USERS="true",
        GATEWAY_GROUP_SESSIONS_PER_USER="false",  # one session for the whole group: Al's and Bo's rows in it
        TELEGRAM_BOT_TOKEN=telegram.token,
        TELEGRAM_API_BASE_URL=telegram.base_url,
        TELEGRAM_STREAMING="false",
        HERMES_LOCAL_STATE=str(tmp_path / "local.json"),
    )


class Chat:
    def __init__(self, client: Client, telegram: MediaTelegram) -> None:
        self.client, self.telegram, self.n = client, telegram, 0

    def say(self, text: str, user: int, chat: int, photo: bool = False) -> None:
        self.n += 1
        sender = {"id": user, "is_bot": False, "first_name": {42: "Al", 43: "Bo"}[user]}
        where = {"id": chat, "type": "private", "first_name": "Al"} if chat > 0 else {"id": chat, "type": "supergroup",
                                                                                       "title": "Ops"}  # fmt: skip
        message: dict[str, Any] = {"message_id": self.n, "date": int(time.time()), "chat": where, "from": sender}
        if photo:
            file_id = f"photo-{self.n}"
            self.telegram.add_file(file_id, PHOTO)
            message["photo"] = [{"file_id": file_id, "file_unique_id": f"u{self.n}", "width": 64, "height": 64}]
            message["caption"] = text
        else:
            message["text"] = text
        before = len(self.answers(chat))
        assert self.client.telegram({"update_id": 7000 + self.n, "message": message})[0] == 200
        deadline = time.time() + 30
        while len(self.answers(chat)) <= before and time.time() < deadline:
            time.sleep(0.1)
        assert len(self.answers(chat)) > before, f"no answer to {text!r}"

    def answers(self, chat: int) -> list[str]:
        return [
            str(r["text"])
            for r in self.client.outbox(chat_id=str(chat))
            if not str(r["delivery_id"]).startswith("busy-")
        ]


def bucket_keys() -> list[str]:
    import boto3

    s3 = boto3.client("s3", region_name=wiring.region())
    bucket = wiring.bindings().buckets[MEDIA.name]
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", []))


def test_a_user_forgets_themselves_from_the_chat(client: Client, telegram: MediaTelegram) -> None:
    chat = Chat(client, telegram)
    # Given Al's DM: a note, a reminder, a photo; and a group where Al (with a photo) and Bo talk
    chat.say("hello, I am Al", 42, 42)
    chat.say('echo-tool:memory {"action": "add", "text": "Al takes his tea black"}', 42, 42)
    chat.say('echo-tool:cronjob {"action": "create", "prompt": "Remind Al to stretch", "schedule": "every 2h"}', 42, 42)
    chat.say("my cat", 42, 42, photo=True)
    chat.say("hi group, here is my dog", 42, GROUP, photo=True)
    chat.say("Bo says hello to the group", 43, GROUP)
    stores = wiring.personal_stores_on(wiring.bindings(), wiring.settings(), wiring.region())
    (dm,) = stores.data.sessions_reached(MAIN.dm_reach(AL))
    group_id = wiring.session_stores().routes.get(f"agent:main:telegram:group:{GROUP}").session_id  # type: ignore[union-attr]
    assert any(k.startswith(f"default/{dm.session_id}/") and k.endswith(".json") for k in bucket_keys())
    assert any(k.startswith(f"default/{group_id}/") for k in bucket_keys())
    assert stores.notes.list_notes(MAIN.memory_scope(AL)) and stores.jobs is not None and stores.jobs.list()
    owner = MAIN.usage_owner(AL)
    assert stores.usage is not None and owner is not None and stores.usage.held(owner)["counters"]  # /usage's

    # When Al sends /forget: he is told what goes, and nothing goes yet
    chat.say("/forget", 42, 42)
    assert "/forget confirm within 5 minutes" in chat.answers(42)[-1]
    client.gateway.run_schedule("expiry")
    assert stores.data.sessions_reached(MAIN.dm_reach(AL)) != []
    # When he confirms, and the every-minute tick runs
    chat.say("/forget confirm", 42, 42)
    assert chat.answers(42)[-1].startswith("Deleting your data now")
    client.gateway.run_schedule("expiry")
    deadline = time.time() + 15
    while not chat.answers(42)[-1].startswith("Done:") and time.time() < deadline:
        time.sleep(0.1)

    # Then he is told, and his DM sessions, rows, files, notes and reminder are gone
    assert chat.answers(42)[-1].startswith("Done: your data was deleted (1 direct sessions")
    assert stores.data.sessions_reached(MAIN.dm_reach(AL)) == []
    assert stores.data.transcript(dm.session_id) == []
    assert wiring.session_stores().routes.get("agent:main:telegram:dm:42") is None
    assert [k for k in bucket_keys() if k.startswith(f"default/{dm.session_id}/")] == []
    assert stores.notes.list_notes(MAIN.memory_scope(AL)) == [] and stores.jobs.list() == []
    assert stores.usage.held(owner) == {"sessions_used": [], "told_window": None, "counters": {}}
    # his group message is redacted and its photo gone; Bo's message stays
    rows = stores.data.transcript(group_id)
    mine = [r for r in rows if r.role == "user" and r.seq == 1]
    assert [(r.content, r.attachments, r.sender_name) for r in mine] == [(REDACTED, (), None)]
    assert [r.content for r in rows if r.sender_name == "Bo"] == ["Bo says hello to the group"]
    assert [k for k in bucket_keys() if k.startswith(f"default/{group_id}/1-")] == []


def test_the_operator_exports_and_forgets_a_user_with_the_cli(
    client: Client, telegram: MediaTelegram, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    chat = Chat(client, telegram)
    chat.say("Bo's plans for Friday", 43, 43, photo=True)
    chat.say("Bo in the group", 43, GROUP)
    chat.say("Al in the group", 42, GROUP)
    out = tmp_path / "bo"

    # When the operator exports Bo
    assert cli(["users", "export", "telegram:43", "--out", str(out), "--local"]) == 0
    assert f"exported telegram:43 to {out}: 1 direct sessions, 1 group messages" in capsys.readouterr().out
    # Then his messages are in export.json and his photo in files/, nothing of Al's
    data = json.loads((out / "export.json").read_text(encoding="utf-8"))
    (session,) = data["profiles"]["default"]["sessions"]
    assert session["messages"][0]["content"] == "Bo's plans for Friday"
    assert [m["content"] for m in data["messages_in_groups"]] == ["Bo in the group"]
    photo = session["messages"][0]["attachments"][0]["key"]
    assert (out / "files" / photo).read_bytes() == PHOTO and (out / "files" / f"{photo}.json").exists()
    assert "Al in the group" not in (out / "export.json").read_text(encoding="utf-8")

    # When the operator forgets Bo without confirming, nothing goes
    monkeypatch.setattr("builtins.input", lambda prompt: "no")
    assert cli(["users", "forget", "telegram:43", "--local"]) == 1
    assert "cancelled: nothing deleted" in capsys.readouterr().err
    # and with the user typed back, it does
    monkeypatch.setattr("builtins.input", lambda prompt: "telegram:43")
    assert cli(["users", "forget", "telegram:43", "--local"]) == 0
    answer = capsys.readouterr().out
    assert "forgot telegram:43: 1 direct sessions (2 messages), 1 group messages redacted" in answer
    assert "before this release" in answer
    stores = wiring.personal_stores_on(wiring.bindings(), wiring.settings(), wiring.region())
    assert stores.data.sessions_reached(MAIN.dm_reach(BO)) == [] and photo not in bucket_keys()
    group = [r.content for r in stores.data.transcript(client_group(client)) if r.role == "user"]
    assert group == [REDACTED, "Al in the group"]
    # Again, for a script: nothing more to delete, and the answer is JSON alone
    assert cli(["users", "forget", "telegram:43", "--yes", "--json", "--local"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["user"] == "telegram:43" and again["deleted"]["sessions"] == again["deleted"]["redacted"] == 0
    # A mistyped user is refused with the form to use
    assert cli(["users", "forget", "telegram", "--yes", "--local"]) == 2
    assert "<platform>:<user id>" in capsys.readouterr().err


def client_group(client: Client) -> str:
    route = wiring.session_stores().routes.get(f"agent:main:telegram:group:{GROUP}")
    assert route is not None
    return route.session_id
