"""The one-time approval page, attacked over real HTTP on loopback: only its own link, once, from its own
origin, with its own form, decides anything."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import anyio
import httpx
import pytest

from faultplane.mcp_server.approval import ApprovalPage, PlanSummary

pytestmark = pytest.mark.anyio


def summary(title: str = "pool exhaustion") -> PlanSummary:
    return PlanSummary(
        title=title,
        family="payment",
        approval_hash="ab" * 32,
        reasons=["injects resource_exhaustion, which needs approval by policy"],
        activities=['method: action exhaust: driver faults.register {"fault_type": "resource_exhaustion"}'],
    )


@pytest.fixture
def page() -> Iterator[ApprovalPage]:
    p = ApprovalPage()
    yield p
    p.close()


def csrf_of(text: str) -> str:
    m = re.search(r"name='csrf' value='([^']+)'", text)
    assert m is not None
    return m.group(1)


def test_the_page_shows_the_plan_and_decides_once(page: ApprovalPage) -> None:
    pid, url = page.open(summary())
    with httpx.Client(timeout=5) as http:
        r = http.get(url)
        assert r.status_code == 200
        assert "ab" * 32 in r.text and "resource_exhaustion" in r.text and "Approve" in r.text
        for header, value in {
            "cache-control": "no-store",
            "x-frame-options": "DENY",
            "referrer-policy": "no-referrer",
        }.items():
            assert r.headers[header] == value
        assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
        done = http.post(url, data={"csrf": csrf_of(r.text), "decision": "approve"})
        assert done.status_code == 200 and "Approved" in done.text
        assert page.get(pid) is not None and page.get(pid).decision == "approve"  # type: ignore[union-attr]
        # the link is spent: neither a second look nor a second (contrary) answer does anything
        assert http.get(url).status_code == 404
        again = http.post(url, data={"csrf": csrf_of(r.text), "decision": "deny"})
        assert again.status_code == 404
        assert page.get(pid).decision == "approve"  # type: ignore[union-attr]


def test_guessed_or_altered_links_find_nothing(page: ApprovalPage) -> None:
    pid, url = page.open(summary())
    base, secret = url.rsplit(".", 1)
    with httpx.Client(timeout=5) as http:
        for bad in (
            f"{base}.{secret[:-1]}A" if secret[-1] != "A" else f"{base}.{secret[:-1]}B",
            f"{base}.",
            base,
            f"{page.origin}/approve/{pid}",
            f"{page.origin}/approve/../approve/{pid}.{secret}x",
            f"{page.origin}/",
            f"{page.origin}/approve/%00.{secret}",
        ):
            assert http.get(bad).status_code == 404, bad
            assert http.post(bad, data={"csrf": "x", "decision": "approve"}).status_code == 404, bad
    assert page.get(pid).decision == "pending"  # type: ignore[union-attr]


def test_cross_site_and_rebinding_requests_are_refused(page: ApprovalPage) -> None:
    pid, url = page.open(summary())
    with httpx.Client(timeout=5) as http:
        csrf = csrf_of(http.get(url).text)
        assert http.get(url, headers={"Host": "evil.example"}).status_code == 403  # DNS rebinding
        for origin in ("http://evil.example", "null", "http://127.0.0.1:1"):
            r = http.post(url, data={"csrf": csrf, "decision": "approve"}, headers={"Origin": origin})
            assert r.status_code == 403, origin
        # a form that is not the page's own (no or wrong csrf), or a decision that is not a button
        assert http.post(url, data={"decision": "approve"}).status_code == 400
        assert http.post(url, data={"csrf": "guess", "decision": "approve"}).status_code == 400
        assert http.post(url, data={"csrf": csrf, "decision": "APPROVE"}).status_code == 400
        assert http.post(url, data={"csrf": csrf, "decision": "yes"}).status_code == 400
        assert http.post(url, content=b"x" * 10_000).status_code == 413
        for method in ("PUT", "DELETE", "PATCH"):
            assert http.request(method, url).status_code == 405
    assert page.get(pid).decision == "pending"  # type: ignore[union-attr]


def test_hostile_plan_text_is_shown_not_run(page: ApprovalPage) -> None:
    hostile = "<script>document.forms[0].submit()</script><img src=x onerror=alert(1)> \u202eevil"
    _, url = page.open(summary(hostile))
    with httpx.Client(timeout=5) as http:
        text = http.get(url).text
    assert "<script>" not in text and "<img" not in text and "&lt;script&gt;" in text


def test_links_expire(monkeypatch: pytest.MonkeyPatch) -> None:
    page = ApprovalPage(ttl_s=0.2)
    try:
        pid, url = page.open(summary())
        time.sleep(0.4)
        with httpx.Client(timeout=5) as http:
            assert http.get(url).status_code == 404
        assert page.get(pid) is None
    finally:
        page.close()


async def test_a_waiting_call_gives_up_and_the_link_dies_with_it(page: ApprovalPage) -> None:
    pid, url = page.open(summary())
    with anyio.fail_after(10):
        assert await page.wait(pid, 0.2) == "expired"
    async with httpx.AsyncClient(timeout=5) as http:
        assert (await http.get(url)).status_code == 404


async def test_a_decision_wakes_the_waiting_call(page: ApprovalPage) -> None:
    pid, url = page.open(summary())

    async def click() -> None:
        await anyio.sleep(0.2)
        async with httpx.AsyncClient(timeout=5) as http:
            csrf = csrf_of((await http.get(url)).text)
            await http.post(url, data={"csrf": csrf, "decision": "deny"})

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(click)
            assert await page.wait(pid, 8) == "deny"
