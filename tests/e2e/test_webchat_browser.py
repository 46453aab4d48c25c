"""The local web chat page in a real headless browser (Debian's Chromium, driven by Playwright):
a message typed and answered, the session header (with its title, which stays after /compress),
history across a reload, buttons from the gateway's options only (an approval's, never a reply's
text), a streamed answer growing in place, the command buttons, the other platforms' outbox, and
errors shown rather than swallowed."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.e2e.conftest import Client, telegram_update

if TYPE_CHECKING:
    from playwright.sync_api import Page, Route

pytestmark = pytest.mark.e2e

TIMEOUT_MS = 15_000


@pytest.fixture
def open_page(start_gateway: Callable[..., Client]) -> Iterator[Callable[..., tuple[Page, Client]]]:
    """Local mode started with the given environment, and its page in a headless Chromium."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no Chromium on PATH (apt-get install chromium); CI installs it")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in requirements/dev.txt")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"], headless=True)

        def open_one(**env: str) -> tuple[Page, Client]:
            client = start_gateway(**env)
            tab = browser.new_context().new_page()
            tab.set_default_timeout(TIMEOUT_MS)
            sync_api.expect.set_options(timeout=TIMEOUT_MS)
            tab.goto(client.gateway.url + "/")
            return tab, client

        try:
            yield open_one
        finally:
            browser.close()


@pytest.fixture
def page(open_page: Callable[..., tuple[Page, Client]]) -> tuple[Page, Client]:
    return open_page()


def chat_id_of(tab: Page) -> str:
    return str(tab.evaluate("localStorage.getItem('hermes.chat')"))


def craft_outbox_row(chat_id: str, delivery_id: str, text: str, buttons: list[dict[str, str]] | None = None) -> None:
    """A reply as the delivery function records it, written straight into the local outbox."""
    from hermes_gateway import wiring

    outbox = wiring.outbox()
    now = time.time()
    outbox.record_claimed(
        delivery_id,
        platform="webchat",
        chat_id=chat_id,
        thread_id=None,
        text=text,
        turn_id="turn-crafted",
        chunk=1,
        chunks=1,
        now=now,
        buttons=buttons,
    )
    outbox.mark(delivery_id, "recorded", now)


def test_a_message_is_sent_and_its_answer_rendered(page: tuple[Page, Client]) -> None:
    from playwright.sync_api import expect

    tab, client = page
    # Given the page, with no session yet
    expect(tab.locator("#session")).to_have_text("no session yet")
    expect(tab.locator("#agent")).to_have_text("echo")

    # When a newcomer types a message and presses Enter
    tab.locator("#text").fill("hello browser")
    tab.locator("#text").press("Enter")

    # Then their message and the echo agent's answer are rendered, with sender and time
    expect(tab.locator(".msg.me .body")).to_have_text(["hello browser"])
    answer = tab.locator(".msg.bot").filter(has_text="Echo: hello browser")
    expect(answer).to_have_count(1)
    expect(answer.locator(".sender")).to_have_text("Hermes")
    expect(answer.locator("time")).to_have_count(1)
    expect(tab.locator("#typing")).to_be_hidden()

    # And the header names the session the chat is now in, as the gateway knows it
    chat_id = chat_id_of(tab)
    status, session = client.request(
        "GET",
        f"/local/session?chat_id={chat_id}",
        headers={"x-hermes-local-token": client.gateway.local_secrets["WEBCHAT_TOKEN"]},
    )
    assert status == 200 and session["session_id"]
    expect(tab.locator("#session")).to_have_attribute("data-session-id", session["session_id"])
    expect(tab.locator("#session")).to_contain_text(session["session_id"])

    # When the page is reloaded, the conversation is still there (and not answered twice)
    tab.reload()
    expect(tab.locator(".msg.me .body")).to_have_text(["hello browser"])
    expect(tab.locator(".msg.bot")).to_have_count(1)
    expect(tab.locator("#session")).to_have_attribute("data-session-id", session["session_id"])
    assert chat_id_of(tab) == chat_id

    # When a reply comes with the gateway's options, they are buttons; clicking one sends its reply
    options = [{"label": "Approve", "reply": "/approve"}, {"label": "Deny", "reply": "/deny"}]
    craft_outbox_row(chat_id, "crafted-approval", "Run `make deploy` (**production**)?", options)
    approval = tab.locator(".msg.bot").filter(has_text="Run make deploy")
    expect(approval.locator("code")).to_have_text("make deploy")
    expect(approval.locator("strong")).to_have_text("production")
    expect(approval.locator(".actions button")).to_have_text(["Approve", "Deny"])
    approval.get_by_role("button", name="Approve").click()
    expect(approval.locator(".actions button.chosen")).to_have_text("Approve")
    expect(approval.get_by_role("button", name="Deny")).to_be_disabled()
    # the text it sent went through the gateway, which answers /approve itself (nothing waits here)
    expect(tab.locator(".msg.bot").filter(has_text="Nothing is waiting for approval")).to_have_count(1)
    rows = client.wait_outbox(3, platform="webchat", chat_id=chat_id)
    assert [r["text"] for r in rows][-1] == "Nothing is waiting for approval."

    # And a reply to another platform shows in the "Other platforms" panel
    assert client.telegram(telegram_update(4242, "hi from telegram"))[0] == 200
    expect(tab.locator("#others-count")).to_have_text("1")
    tab.locator("#others-toggle").click()
    expect(tab.locator("#other-list li[data-platform=telegram] .text")).to_have_text(["Echo: hi from telegram"])

    # When a new chat starts, it is empty and in no session; the old one is still listed
    tab.locator("#new-chat").click()
    assert chat_id_of(tab) != chat_id
    expect(tab.locator(".msg")).to_have_count(0)
    expect(tab.locator("#session")).to_have_text("no session yet")
    expect(tab.locator("#chat-list li")).to_have_count(2)
    tab.locator(f"#chat-list button[data-chat-id={chat_id}]").click()
    expect(tab.locator(".msg.bot").filter(has_text="Echo: hello browser")).to_have_count(1)


def test_commands_buttons_markdown_and_errors(page: tuple[Page, Client]) -> None:
    from playwright.sync_api import expect

    tab, _ = page
    # The command buttons come from /local/info; a gateway command is answered by the gateway
    expect(tab.locator("#commands button")).to_contain_text(["/help", "/whoami", "/new", "/undo", "/sethome", "/stop"])
    tab.locator("#commands button", has_text="/whoami").click()
    whoami = tab.locator(".msg.bot").filter(has_text="user id")
    expect(whoami.locator(".sender")).to_have_text("Gateway")

    # Typing "/" opens the palette; Tab completes, Shift+Enter is a new line, Enter sends
    tab.locator("#text").fill("/he")
    expect(tab.locator("#palette li")).to_have_count(1)
    tab.locator("#text").press("Tab")
    expect(tab.locator("#text")).to_have_value("/help ")
    tab.locator("#text").fill("line one")
    tab.locator("#text").press("Shift+Enter")
    tab.locator("#text").type("line two")
    expect(tab.locator("#text")).to_have_value("line one\nline two")

    # A row carrying the gateway's `buttons` gets them; untrusted text is never HTML, links only http(s)
    chat_id = chat_id_of(tab)
    crafted = {
        "delivery_id": "crafted-buttons",
        "platform": "webchat",
        "chat_id": chat_id,
        "thread_id": None,
        "text": "<img src=x onerror=alert(1)> see [docs](https://example.org) or [x](javascript:alert(1))\n"
        "```sh\nrm -rf <build>\n```",
        "turn_id": "t",
        "chunk": 1,
        "chunks": 1,
        "status": "recorded",
        "created_at": time.time(),
        "buttons": [
            {"label": "Allow once", "reply": "/approve"},
            {"label": "Never", "reply": "/deny always"},
            "Made up",  # not the gateway's shape: no button
            {"label": "No reply"},
        ],
    }

    def with_crafted_row(route: Route) -> None:
        response = route.fetch()
        rows: list[dict[str, Any]] = response.json()
        route.fulfill(response=response, body=json.dumps([*rows, crafted]))

    tab.route("**/local/outbox", with_crafted_row)
    row = tab.locator(".msg.bot").filter(has_text="see docs")
    expect(row.locator(".actions button")).to_have_text(["Allow once", "Never"])
    expect(row.locator(".actions button").first).to_have_attribute("data-send", "/approve")
    expect(row.locator(".actions button").last).to_have_attribute("data-send", "/deny always")
    assert row.locator("img").count() == 0
    expect(row.locator(".body")).to_contain_text("<img src=x onerror=alert(1)>")
    expect(row.locator("a")).to_have_count(1)
    expect(row.locator("a")).to_have_attribute("href", "https://example.org")
    expect(row.locator("pre code")).to_have_text("rm -rf <build>")
    tab.unroute_all(behavior="wait")  # the poll in flight finishes first

    # A refused message (the token went stale) is flagged and the banner says what to do
    tab.route("**/webhooks/webchat", lambda route: route.fulfill(status=401, body='{"ok": false}'))
    tab.locator("#text").fill("refused")
    tab.locator("#text").press("Enter")
    expect(tab.locator(".msg.me.failed .error")).to_contain_text("token")
    expect(tab.locator("#banner")).to_contain_text("reload")
    tab.unroute_all(behavior="wait")

    # The network going away is shown too, and the message can be retried
    tab.route("**/webhooks/webchat", lambda route: route.abort())
    tab.locator("#text").fill("unreachable")
    tab.locator("#text").press("Enter")
    failed = tab.locator(".msg.me.failed").filter(has_text="unreachable")
    expect(failed.locator(".error")).to_contain_text("Could not reach the gateway")
    tab.unroute_all(behavior="wait")
    failed.get_by_role("button", name="Retry").click()
    expect(tab.locator(".msg.bot").filter(has_text="Echo: unreachable")).to_have_count(1)


PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 2


def test_buttons_come_from_the_gateways_options_never_from_a_replys_text(
    open_page: Callable[..., tuple[Page, Client]], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    # Given local mode where the memory tool waits for the user's approval
    tab, _ = open_page(GATEWAY_TOOLS_NEEDING_APPROVAL="memory")
    # When an answer's last line is a row of bracketed items (a model's "[Yes] [No]")
    tab.locator("#text").fill("Shall I?\n[Yes] [No]")
    tab.locator("#text").press("Enter")
    # Then it is text, not buttons that would send "/yes"
    listed = tab.locator(".msg.bot").filter(has_text="Echo: Shall I?")
    expect(listed).to_have_count(1)
    expect(listed.locator(".body")).to_contain_text("[Yes] [No]")
    expect(listed.locator(".actions button")).to_have_count(0)
    # Nor is the echo agent's own line about a photo a button that would send "/images: ..."
    photo = tmp_path / "dot.png"
    photo.write_bytes(PNG)
    tab.locator("#file").set_input_files(str(photo))
    expect(tab.locator("#pending")).to_contain_text("dot.png")
    expect(tab.locator("#pending")).not_to_contain_text("\u2026")  # uploaded
    tab.locator("#text").fill("look")
    tab.locator("#text").press("Enter")
    seen = tab.locator(".msg.bot").filter(has_text=f"[images: image/png {len(PNG)} bytes]")
    expect(seen).to_have_count(1)
    expect(seen.locator(".actions button")).to_have_count(0)

    # When a tool call waits for approval, Then its question carries the gateway's buttons
    tab.locator("#text").fill('echo-tool:memory {"action": "add", "text": "likes green tea"}')
    tab.locator("#text").press("Enter")
    question = tab.locator(".msg.bot").filter(has_text="wants to run")
    expect(question.locator(".actions button")).to_have_text(["Approve", "Approve for session", "Deny"])
    expect(question.locator(".actions button").first).to_have_attribute("data-send", "/approve")
    # And pressing Approve runs the tool, whose answer follows
    question.get_by_role("button", name="Approve", exact=True).click()
    expect(tab.locator(".msg.bot").filter(has_text="Echo: [memory]")).to_have_count(1)


def test_a_streamed_answer_grows_in_the_page_and_its_row_ends_with_the_answer(
    open_page: Callable[..., tuple[Page, Client]],
) -> None:
    from playwright.sync_api import expect

    # Given a model that writes slowly (a word every 80 ms) and the web chat's streaming (on by default)
    tab, client = open_page(
        HERMES_ECHO_STREAM_DELAY="0.08", WEBCHAT_STREAMING_FIRST_AFTER="0.2", WEBCHAT_STREAMING_EDIT_INTERVAL="0.3"
    )
    question = " ".join(f"word{i}" for i in range(40))
    final = f"Echo: {question}"
    # When the user asks
    tab.locator("#text").fill(question)
    tab.locator("#text").press("Enter")
    # Then the answer is shown while it is written, growing in one message
    shown: list[str] = []
    deadline = time.time() + 30
    while time.time() < deadline:
        texts = tab.locator(".msg.bot .body").all_inner_texts()
        if texts and (not shown or texts[-1] != shown[-1]):
            shown.append(texts[-1])
        if shown and shown[-1] == final:
            break
        time.sleep(0.05)
    assert shown and shown[-1] == final, shown
    partial = [text for text in shown if text != final]
    assert partial, "the answer appeared only once it was complete"
    assert all(final.startswith(text.rstrip()) for text in partial), partial
    expect(tab.locator(".msg.bot")).to_have_count(1)
    expect(tab.locator(".msg.bot.streaming")).to_have_count(0)  # done: no cursor
    # And the outbox row holds the whole answer, not its first words
    (row,) = client.wait_outbox(1, settled=True, platform="webchat")
    assert (row["text"], row["status"]) == (final, "sent")


def test_the_header_shows_the_title_and_it_stays_after_compress(page: tuple[Page, Client]) -> None:
    from playwright.sync_api import expect

    tab, _ = page
    tab.locator("#text").fill("hello")
    tab.locator("#text").press("Enter")
    expect(tab.locator(".msg.bot").filter(has_text="Echo: hello")).to_have_count(1)
    # When the user names the session, Then the header says so
    tab.locator("#text").fill("/title Trip plans")
    tab.locator("#text").press("Enter")
    expect(tab.locator(".msg.bot").filter(has_text='Session titled "Trip plans".')).to_have_count(1)
    expect(tab.locator("#session")).to_have_attribute("data-title", "Trip plans")
    expect(tab.locator("#session")).to_contain_text("Trip plans")
    before = tab.locator("#session").get_attribute("data-session-id")
    # When the session is compressed, it goes on in a new session under the same title
    tab.locator("#text").fill("/compress")
    tab.locator("#text").press("Enter")
    expect(tab.locator("#session")).not_to_have_attribute("data-session-id", before or "")
    expect(tab.locator("#session")).to_have_attribute("data-title", "Trip plans")
