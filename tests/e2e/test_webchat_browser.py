"""The local web chat page in a real headless browser (Debian's Chromium, driven by Playwright):
a message typed and answered, the session header, history across a reload, approvals as buttons,
the command buttons, the other platforms' outbox, and errors shown rather than swallowed."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from tests.e2e.conftest import Client, telegram_update

if TYPE_CHECKING:
    from playwright.sync_api import Page, Route

pytestmark = pytest.mark.e2e

TIMEOUT_MS = 15_000


@pytest.fixture
def page(start_gateway: Callable[..., Client]) -> Iterator[tuple[Page, Client]]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no Chromium on PATH (apt-get install chromium); CI installs it")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in requirements/dev.txt")
    client = start_gateway()
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"], headless=True)
        try:
            tab = browser.new_context().new_page()
            tab.set_default_timeout(TIMEOUT_MS)
            sync_api.expect.set_options(timeout=TIMEOUT_MS)
            tab.goto(client.gateway.url + "/")
            yield tab, client
        finally:
            browser.close()


def chat_id_of(tab: Page) -> str:
    return str(tab.evaluate("localStorage.getItem('hermes.chat')"))


def craft_outbox_row(chat_id: str, delivery_id: str, text: str) -> None:
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

    # When a reply offers options, they are buttons; clicking one sends its command
    craft_outbox_row(chat_id, "crafted-approval", "Run `make deploy` (**production**)?\n[Approve] [Deny]")
    approval = tab.locator(".msg.bot").filter(has_text="Run make deploy")
    expect(approval.locator("code")).to_have_text("make deploy")
    expect(approval.locator("strong")).to_have_text("production")
    expect(approval.locator(".body")).not_to_contain_text("[Approve]")
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

    # A row carrying `buttons` gets them; untrusted text is never HTML, links only http(s)
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
        "buttons": ["Allow once", {"label": "Never", "send": "/deny always"}],
    }

    def with_crafted_row(route: Route) -> None:
        response = route.fetch()
        rows: list[dict[str, Any]] = response.json()
        route.fulfill(response=response, body=json.dumps([*rows, crafted]))

    tab.route("**/local/outbox", with_crafted_row)
    row = tab.locator(".msg.bot").filter(has_text="see docs")
    expect(row.locator(".actions button")).to_have_text(["Allow once", "Never"])
    expect(row.locator(".actions button").first).to_have_attribute("data-send", "/allow once")
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
