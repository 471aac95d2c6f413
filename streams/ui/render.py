"""Jinja2 rendering shared by the explorer (``streams.ui.app``) and the HTML report
(``streams.report``): one environment over ``streams/ui/templates`` with autoescape on for
every template, the filters the templates use, and the packaged assets
(``streams/ui/static/ui.css``, ``ui.js``).

Autoescape is always on: every value a template prints is HTML-escaped unless it is one of the
packaged assets (marked safe here), so text from logs, rule summaries, host names and reasons
is shown as text, in HTML and inside the inline SVG alike.

Links are made by a :class:`Links` object passed to each page: the server's links point at
its routes; the report's (:class:`ReportLinks`) point inside the file or are plain text.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from functools import cache, lru_cache
from importlib import resources
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
from markupsafe import Markup

from correlators.explain import format_ranks
from streams.ui.views import (
    format_duration,
    format_iso,
    format_ts,
    gpu_label,
    target_label,
    utc_text,
)

__all__ = ["Links", "ReportLinks", "asset", "asset_version", "csp_hash", "environment", "render"]


@cache
def asset(name: str) -> str:
    """The text of a packaged asset (``ui.css``, ``ui.js``)."""
    return resources.files("streams.ui").joinpath("static", name).read_text(encoding="utf-8")


@cache
def asset_version(name: str) -> str:
    """A short hash of an asset's content, for cache-busting URLs (``/static/ui.css?v=...``)."""
    return hashlib.blake2b(asset(name).encode(), digest_size=6).hexdigest()


def csp_hash(text: str) -> str:
    """The CSP source expression (``'sha256-...'``) that allows exactly the inline ``text``."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode() + "'"


class Links:
    """URLs of the explorer's pages; every parameter is URL-encoded. ``None`` from a method
    means "no link" (the template prints plain text)."""

    inline_assets = False

    def list(self, **params: Any) -> str | None:
        """The incident list with filters ``params`` (empty values left out)."""
        query = urlencode({k: v for k, v in params.items() if v not in (None, "")})
        return "/" + (f"?{query}" if query else "")

    def incident(self, attribution_id: str | None) -> str | None:
        """An incident page."""
        return f"/incidents/{quote(attribution_id, safe='')}" if attribution_id else None

    def node(self, host: str | None, cluster: str = "") -> str | None:
        """A node page (the scheduler and empty names have none)."""
        if not host or host.startswith("_"):
            return None
        return "/node?" + urlencode({"host": host, **({"cluster": cluster} if cluster else {})})

    def fabric(self, cluster: str = "") -> str | None:
        """The fabric page."""
        return "/fabric" + (f"?{urlencode({'cluster': cluster})}" if cluster else "")

    def remediations(self, **params: Any) -> str | None:
        """The remediation queue."""
        query = urlencode({k: v for k, v in params.items() if v not in (None, "")})
        return "/remediations" + (f"?{query}" if query else "")

    def static(self, name: str) -> str:
        """A packaged asset's URL."""
        return f"/static/{name}?v={asset_version(name)}"


class ReportLinks(Links):
    """Links of the self-contained report: verdicts in the file by anchor, nothing else."""

    inline_assets = True

    def __init__(self, attribution_ids: set[str]) -> None:
        self._ids = attribution_ids

    def list(self, **params: Any) -> str | None:
        return None

    def incident(self, attribution_id: str | None) -> str | None:
        return f"#{attribution_id}" if attribution_id in self._ids else None

    def node(self, host: str | None, cluster: str = "") -> str | None:
        return None

    def fabric(self, cluster: str = "") -> str | None:
        return None

    def remediations(self, **params: Any) -> str | None:
        return None


def _confidence(value: float) -> str:
    return f"{value:.2f}"


def _join(values: Any, sep: str = ", ") -> str:
    return sep.join(str(v) for v in values if v not in (None, ""))


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The Jinja2 environment of the packaged templates (autoescape on, undefined names an
    error, whitespace trimmed)."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("streams.ui", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update({
        "ts": format_ts,
        "time": lambda ns: format_ts(ns, date=False),
        "iso": format_iso,
        "dur": format_duration,
        "secs": lambda s: format_duration(round(float(s) * 1e9)),
        "utc_text": utc_text,
        "ranks": format_ranks,
        "gpu": gpu_label,
        "target": target_label,
        "conf": _confidence,
        "join_": _join,
    })
    env.globals["asset"] = lambda name: Markup(asset(name))  # packaged, trusted: never from a request
    return env


def render(template: str, context: Mapping[str, Any]) -> str:
    """Render ``template`` (a file under ``streams/ui/templates``) with ``context``. Raises
    ``jinja2.TemplateError`` for a template bug (an undefined name included)."""
    return environment().get_template(template).render(**context)
