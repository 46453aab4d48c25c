"""The router keeps each user's limits (BEHAVIOUR §11): a message over a limit reaches no model
and the user hears once per window which limit and when it resets; admins are exempt; a platform
and a named profile set their own; the counts are the user's across their sessions; commands
still work; and `/usage` says what the user used."""

from __future__ import annotations

from typing import Any

from hermes_gateway.domain.limits import periods
from hermes_gateway.domain.ports import SessionStores
from hermes_gateway.domain.sessions import SessionTally
from hermes_gateway.domain.source import InboundMessage, SessionSource
from hermes_gateway.services.lifecycle import Successor, end_turn, lease_token_for
from hermes_gateway.services.router import Access, RouteOutcome, route_message
from hermes_gateway.settings import Settings
from tests.fakes.access import FakePairingStore
from tests.fakes.dynamo import MemoryDynamo, session_tables_client
from tests.fakes.services import FakeDeliveryQueue, FakeEvents, FakeStarter, make_settings
from tests.fakes.sessions import memory_stores, usage_book

NOW = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC
DM_KEY = "agent:main:telegram:dm:99"
GROUP_KEY = "agent:main:telegram:group:-5:42"


class World:
    def __init__(self, env: dict[str, str] | None = None, config: dict[str, Any] | None = None) -> None:
        self.client: MemoryDynamo = session_tables_client()
        self.stores: SessionStores = memory_stores(client=self.client)
        self.starter = FakeStarter()
        self.replies = FakeDeliveryQueue()
        self.access = Access(
            pairing=FakePairingStore(), replies=self.replies, events=FakeEvents(), usage=usage_book(self.client)
        )
        self.settings = make_settings({"TELEGRAM_ALLOWED_USERS": "42,43", **(env or {})}, config)
        self.events = 0

    def say(
        self,
        text: str = "hello",
        *,
        at: float = NOW,
        chat_id: str = "99",
        chat_type: str = "dm",
        user_id: str = "42",
        thread_id: str | None = None,
        profile: str | None = None,
    ) -> RouteOutcome:
        self.events += 1
        source = SessionSource(
            "telegram", chat_id=chat_id, chat_type=chat_type, user_id=user_id, user_name="Al", thread_id=thread_id,
            message_id=str(self.events), profile=profile,
        )  # fmt: skip
        message = InboundMessage(source=source, text=text, event_id=f"telegram:b:{self.events}", received_at=at)
        settings: Settings = self.settings.for_profile(profile)
        return route_message(
            message, settings=settings, stores=self.stores, starter=self.starter, access=self.access, now=at
        )

    def end(self, outcome: RouteOutcome, key: str, at: float, tally: SessionTally, spender: str | None) -> None:
        """The turn of `outcome` ends, spending `tally` for `spender` (as the agent's finish does)."""
        token = lease_token_for(outcome.turn_id or "")
        successor = Successor(key, outcome.session_id or "", at, False)
        end_turn(self.stores.leases, self.stores.transcript, self.starter, successor, token, tally=tally,
                 succeeded=True, spender=spender)  # fmt: skip

    def told(self) -> list[str]:
        return [body["text"] for body in self.replies.bodies if str(body["delivery_id"]).startswith("limit-")]

    def rows(self, key: str = DM_KEY) -> list[str]:
        entry = self.stores.routes.get(key)
        assert entry is not None
        return [row.content for row in self.stores.transcript.rows(entry.session_id)]


def spender() -> str:
    from hermes_gateway.domain.limits import spender_key

    key = spender_key(SessionSource("telegram", user_id="42"))
    assert key is not None
    return key


def test_a_burst_over_the_minute_limit_reaches_no_model_and_is_told_once() -> None:
    world = World({"GATEWAY_LIMIT_MESSAGES_PER_MINUTE": "5"})

    outcomes = [world.say(f"m{i}", at=NOW + i) for i in range(12)]

    # The first starts a turn, the next four wait for it; the other seven are refused
    assert [o.status for o in outcomes] == ["started"] + ["queued"] * 4 + ["limited"] * 7
    assert {o.reason for o in outcomes[5:]} == {"messages_per_minute"}
    assert len(world.starter.calls) == 1
    entry = world.stores.routes.get(DM_KEY)
    assert entry is not None and entry.queued == 4
    # Nothing of a refused message is kept: not in the transcript, not in the queue
    assert world.rows() == ["m0"]
    [answer] = world.told()
    assert "5 messages a minute" in answer and "08:01:00 UTC" in answer


def test_the_minute_window_resets_and_the_next_limit_window_is_told_again() -> None:
    world = World({"GATEWAY_LIMIT_MESSAGES_PER_MINUTE": "1"})
    first = world.say(at=NOW)
    world.end(first, DM_KEY, NOW + 1, SessionTally(), None)
    assert world.say(at=NOW + 2).status == "limited"
    assert world.say(at=NOW + 3).status == "limited"

    assert world.say(at=NOW + 60).status == "started"  # a new minute
    assert world.say(at=NOW + 61).status == "limited"

    assert len(world.told()) == 2  # once per window


def test_admins_are_exempt_and_still_counted() -> None:
    world = World({"GATEWAY_LIMIT_MESSAGES_PER_MINUTE": "1", "TELEGRAM_ADMINS": "42"})

    statuses = [world.say(f"m{i}", at=NOW + i).status for i in range(4)]

    assert statuses == ["started", "queued", "queued", "queued"] and world.told() == []
    entry = world.stores.routes.get(DM_KEY)
    assert entry is not None and entry.ledgers[spender()].counts.minute_messages == 4


def test_a_platform_sets_its_own_limit() -> None:
    world = World({"GATEWAY_LIMIT_MESSAGES_PER_MINUTE": "10", "TELEGRAM_LIMITS": "messages_per_minute=2"})

    statuses = [world.say(at=NOW + i).status for i in range(3)]

    assert statuses == ["started", "queued", "limited"]


def test_a_named_profile_sets_its_own_limit_and_counts_its_own_users() -> None:
    profile = {"platforms": {"telegram": {"enabled": True, "allowed_users": ["42"]}},
               "limits": {"messages_per_minute": 1}}  # fmt: skip
    world = World({"GATEWAY_LIMIT_MESSAGES_PER_MINUTE": "3"}, {"profiles": {"coder": profile}})

    coder = [world.say(at=NOW + i, profile="coder").status for i in range(2)]
    default = [world.say(at=NOW + 2 + i).status for i in range(3)]

    assert coder == ["started", "limited"]
    # the same person talking to the deployment's own bot is another user, under its limit
    assert default == ["started", "queued", "queued"]
    assert world.say(at=NOW + 6).status == "limited"


def test_a_users_messages_count_across_their_sessions_and_the_answer_is_one() -> None:
    world = World({"GATEWAY_LIMIT_MESSAGES_PER_MINUTE": "4"})

    dm = [world.say(at=NOW + i).status for i in range(3)]
    group = [world.say(at=NOW + 3 + i, chat_id="-5", chat_type="group").status for i in range(2)]
    again = world.say(at=NOW + 5)

    assert dm == ["started", "queued", "queued"]
    assert group == ["started", "limited"]  # three in the DM and one here make four
    assert again.status == "limited" and len(world.told()) == 1  # told in the group, not again in the DM
    assert world.say(at=NOW + 6, user_id="43", chat_id="-5", chat_type="group").status == "started"  # another user


def test_tokens_and_dollars_a_day_count_the_users_turns_in_every_session() -> None:
    world = World({"GATEWAY_LIMIT_TOKENS_PER_DAY": "1000", "GATEWAY_LIMIT_MESSAGES_PER_MINUTE": "0"})
    first = world.say(at=NOW)
    world.end(first, DM_KEY, NOW + 1, SessionTally(input_tokens=700, output_tokens=200), spender())
    second = world.say(at=NOW + 2, chat_id="-5", chat_type="group")
    assert second.status == "started"  # 900 of 1000
    world.end(second, GROUP_KEY, NOW + 3, SessionTally(input_tokens=90, output_tokens=10), spender())

    refused = world.say(at=NOW + 4)

    assert (refused.status, refused.reason) == ("limited", "tokens_per_day")
    [answer] = world.told()
    assert "1,000 tokens a day" in answer and "00:00 UTC" in answer
    assert world.say(at=NOW + 16 * 3600).status == "started"  # the next day (midnight UTC)

    dollars = World({"GATEWAY_LIMIT_USD_PER_DAY": "0.05"})
    turn = dollars.say(at=NOW)
    dollars.end(turn, DM_KEY, NOW + 1, SessionTally(input_tokens=10, cost_usd=0.06), spender())
    assert dollars.say(at=NOW + 120).reason == "usd_per_day"


def test_in_a_shared_session_each_user_has_their_own_counts() -> None:
    world = World({"GATEWAY_LIMIT_MESSAGES_PER_MINUTE": "1"})
    thread = {"chat_id": "-5", "chat_type": "group", "thread_id": "7"}

    assert world.say(at=NOW, **thread).status == "started"
    assert world.say(at=NOW + 1, user_id="43", **thread).status == "queued"
    assert world.say(at=NOW + 2, **thread).status == "limited"


def test_commands_work_over_a_limit_and_cost_nothing() -> None:
    world = World({"GATEWAY_LIMIT_MESSAGES_PER_MINUTE": "1"})
    world.say(at=NOW)
    assert world.say(at=NOW + 1).status == "limited"

    for command in ("/help", "/usage", "/status", "/stop"):
        assert world.say(command, at=NOW + 2).status == "command", command

    answers = [body["text"] for body in world.replies.bodies if str(body["delivery_id"]).startswith("command-")]
    assert any("/usage" in text for text in answers)  # /help lists it
    assert any(text.startswith("Your usage") for text in answers)
    entry = world.stores.routes.get(DM_KEY)
    assert entry is not None and entry.ledgers[spender()].counts.minute_messages == 1


def test_usage_shows_today_and_this_month_over_every_session() -> None:
    world = World({"GATEWAY_LIMIT_TOKENS_PER_DAY": "100000"})
    yesterday = NOW - 86_400
    old = world.say(at=yesterday)
    world.end(old, DM_KEY, yesterday + 1, SessionTally(input_tokens=1000, cost_usd=0.5), spender())
    dm = world.say(at=NOW)
    world.end(dm, DM_KEY, NOW + 1, SessionTally(input_tokens=200, output_tokens=100, cost_usd=0.01), spender())
    group = world.say(at=NOW + 2, chat_id="-5", chat_type="group")
    world.end(group, GROUP_KEY, NOW + 3, SessionTally(input_tokens=50, cost_usd=0.002), spender())

    world.say("/usage", at=NOW + 4)

    text = world.replies.bodies[-1]["text"]
    assert "Today: 2 messages, 350 tokens, about $0.0120" in text
    assert "This month (January): 3 messages, 1,350 tokens, about $0.5120" in text
    assert "Limits: 20 messages a minute; 100,000 tokens a day." in text


def test_a_message_in_a_users_only_session_of_the_day_costs_no_request_more() -> None:
    world = World()
    first = world.say(at=NOW)
    world.end(first, DM_KEY, NOW + 1, SessionTally(), spender())
    world.client.calls.clear()

    world.say(at=NOW + 5)

    # The route read, its one write (carrying the user's counts), the row: as without limits
    assert world.client.calls == ["GetItem", "UpdateItem", "PutItem"]


def test_the_first_message_of_the_day_in_a_session_finds_and_links_the_users_others() -> None:
    world = World()
    world.say(at=NOW)  # the DM: noted, nothing else used today
    dm_calls = list(world.client.calls)
    world.client.calls.clear()
    world.say(at=NOW + 1, chat_id="-5", chat_type="group")

    # A new session's route is made (read, read, the orphan query, the transaction); then, for
    # the DM's first message of the day: the session noted, the user's sessions of the day looked
    # up (none), the lease taken with the counts, the row
    made = ["GetItem", "GetItem", "Query", "TransactWriteItems"]
    assert dm_calls == [*made, "PutItem", "Query", "UpdateItem", "PutItem"]
    # The group's: noted, looked up (the DM), the DM's route told of the group, the DM's counts
    # read, then as usual
    assert world.client.calls == [*made, "PutItem", "Query", "UpdateItem", "BatchGetItem", "UpdateItem", "PutItem"]
    day = periods(NOW).day
    assert sorted(item["sk"] for item in world.client.items("access")) == [DM_KEY, GROUP_KEY]
    assert all(item["day"] == day for item in world.client.items("access"))
    dm, group = world.stores.routes.get(DM_KEY), world.stores.routes.get(GROUP_KEY)
    assert dm is not None and dm.ledgers[spender()].peers == {day: frozenset({GROUP_KEY})}
    assert group is not None and group.ledgers[spender()].peers == {day: frozenset({DM_KEY})}

    # and a later message of either reads the other's route once, with no lookup
    world.client.calls.clear()
    world.say(at=NOW + 2)
    assert world.client.calls[:2] == ["GetItem", "BatchGetItem"]


def test_the_earlier_session_learns_of_the_later_one_from_its_own_route() -> None:
    world = World({"GATEWAY_LIMIT_MESSAGES_PER_MINUTE": "3"})
    assert world.say(at=NOW).status == "started"  # the DM, alone today
    assert world.say(at=NOW + 1, chat_id="-5", chat_type="group").status == "started"  # finds the DM
    assert world.say(at=NOW + 2, chat_id="-5", chat_type="group").status == "queued"

    # The DM's next message reads no lookup: its route was told of the group, which has two
    assert world.say(at=NOW + 3).status == "limited"
