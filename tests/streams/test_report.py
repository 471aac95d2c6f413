"""``faultstream replay BUNDLE --html report.html`` (``streams/report.py``): every example
bundle's report renders from the explorer's own incident template, references nothing outside
itself, and opens offline (``file://``, network off) in a real headless Chromium showing the
culprit and the cause marker, with its inline script allowed by the page's own CSP.

Chromium that cannot start makes the browser test FAIL with the reason (never skip).
"""

from __future__ import annotations

import html.parser
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from streams.cli import app
from streams.replay import replay_bundle
from streams.report import render_report
from tests.streams.test_ui import CHROMIUM, XSS_LINE, launch_chromium, xss_bundle

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "incidents"
BUNDLES = sorted(p.parent for p in EXAMPLES.glob("*/expected.yaml"))
#: attributes whose value a browser fetches or follows
URL_ATTRS = {"src", "href", "action", "formaction", "poster", "data", "srcset", "xlink:href", "background"}


class _Refs(html.parser.HTMLParser):
    """Every URL-bearing attribute, every element name, and the text of <style> blocks."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.urls: list[tuple[str, str, str]] = []
        self.tags: list[str] = []
        self.styles: list[str] = []
        self.csp = ""
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self._in_style = tag == "style"
        if tag == "meta" and dict(attrs).get("http-equiv", "").lower() == "content-security-policy":
            self.csp = dict(attrs).get("content") or ""
        for name, value in attrs:
            if name in URL_ATTRS and value is not None:
                self.urls.append((tag, name, value))

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.styles.append(data)


def _check_self_contained(page: str) -> _Refs:
    refs = _Refs()
    refs.feed(page)
    outside = [(t, n, v) for t, n, v in refs.urls if not v.startswith("#") and not v.startswith("data:")]
    assert not outside, outside[:5]
    assert "link" not in refs.tags and "img" not in refs.tags and "iframe" not in refs.tags
    css = "".join(refs.styles)
    assert css and "url(" not in css and "@import" not in css
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", page, re.IGNORECASE)
    assert refs.csp.startswith("default-src 'none';") and "unsafe-inline" not in refs.csp, refs.csp
    return refs


@pytest.mark.parametrize("bundle", BUNDLES, ids=[b.name for b in BUNDLES])
@pytest.mark.slow
def test_every_example_report_renders_self_contained(bundle):
    result = replay_bundle(bundle)
    page = render_report(result)
    _check_self_contained(page)
    for att in result.attributions:
        assert f'id="{att.attribution_id}"' in page
        assert att.cause_code in page
        for host in att.culprits.hosts:
            assert f">{host}<" in page
    assert render_report(replay_bundle(bundle)) == page  # the same replay, the same bytes


def test_a_script_in_a_log_line_is_escaped_in_the_report(tmp_path):
    page = render_report(replay_bundle(xss_bundle(tmp_path)))
    assert "<script>window.__pwned" not in page
    assert "&lt;script&gt;window.__pwned=1;" in page
    assert page.count("<script>") == 1  # the report's own, inline


@pytest.mark.browser
def test_reports_open_offline_in_chromium_showing_the_culprit(tmp_path):
    from playwright.sync_api import sync_playwright

    bundles = [*BUNDLES, xss_bundle(tmp_path)]
    with sync_playwright() as p:
        browser = launch_chromium(p)
        try:
            context = browser.new_context(offline=True, viewport={"width": 1360, "height": 1000})
            requests: list[str] = []
            context.on("request", lambda r: requests.append(r.url))
            page = context.new_page()
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            for bundle in bundles:
                result = replay_bundle(bundle)
                out = tmp_path / f"{bundle.name}.html"
                out.write_text(render_report(result), encoding="utf-8")
                requests.clear()
                page.goto(out.as_uri())
                main = result.attribution
                section = page.locator(f"section[data-attribution-id='{main.attribution_id}']")
                assert section.locator("[data-testid=root-cause]").inner_text() == main.cause_code
                assert section.locator("[data-testid=culprit-hosts]").inner_text() == (
                    ", ".join(main.culprits.hosts) or "-"), bundle.name
                # a cause marker wherever there is a cause to place: cause evidence, or a cause
                # inferred from a pattern on a culprit host
                marker = section.locator("[data-testid=cause-marker]")
                causes = [i for i in main.evidence if i.role == "cause"]
                placeable = bool(causes) or bool(main.evidence and main.culprits.hosts)
                assert marker.count() == (1 if placeable else 0), bundle.name
                if placeable:
                    want = {i.host for i in causes} if causes else {main.culprits.hosts[0]}
                    assert marker.get_attribute("data-host") in want, (bundle.name, marker.get_attribute("data-host"))
                # the inline script ran (its hash is in the page's CSP): it counted the rows
                shown = section.locator("[data-evidence-filter] .shown").inner_text()
                assert shown == f"{min(len(main.evidence), 400)} shown", (bundle.name, shown)
                assert requests == [out.as_uri()], (bundle.name, requests)
                assert not errors, (bundle.name, errors)
                if bundle.name == "public-rc15-pcie-aer-xid79-multinode":
                    assert section.locator("[data-testid=cause-marker]").get_attribute("data-rank") == "9"
                    page.screenshot(path=str(tmp_path / "report-rc15.png"), full_page=True)
                if bundle.name == "xss-injected-log-line":
                    assert page.evaluate("window.__pwned") is None
                    assert any(XSS_LINE.split("ERROR ")[1][:40] in t
                               for t in page.locator("[data-testid=log-line]").all_inner_texts())
            context.close()
        finally:
            browser.close()
    assert Path(CHROMIUM).exists()


def test_replay_html_option_writes_the_report(tmp_path):
    bundle = EXAMPLES / "fabric-port-flap-two-jobs"
    out = tmp_path / "report.html"
    result = CliRunner().invoke(app, ["replay", str(bundle), "--no-store", "--html", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text(encoding="utf-8") == render_report(replay_bundle(bundle))
    page = out.read_text(encoding="utf-8")
    assert page.count('data-testid="incident"') == 4  # two jobs, the port, the incident
    assert "leaf-02/swp1" in page and "node-a05/mlx5_0/1" in page
    refused = CliRunner().invoke(app, ["replay", "--from-clickhouse", "--html", str(tmp_path / "x.html")])
    assert refused.exit_code == 2 and "--html writes the report of a BUNDLE replay" in refused.output
