"""The incident explorer: a Starlette app of server-rendered pages over faultstream's ClickHouse
tables (``faultstream ui``).

Routes (all ``GET`` unless said otherwise):

==================================  ==============================================================
``/``                               fleet summary per cluster, then the incident list (one
                                    row per incident, its other verdicts folded under it):
                                    filters ``cluster``, ``domain``,
                                    ``root_cause`` (a code or a dotted prefix), ``quality``,
                                    ``status``, ``scope``, ``since`` / ``until`` (ISO 8601, UTC
                                    unless zoned); newest first; refreshes itself
``/api/incidents``                  the same rows as JSON (what the list polls):
                                    ``{"count", "verdicts", "refreshed", "rows": [{"id",
                                    "revision", "group", "cells": [...], "verdict": {...},
                                    "members": [<rows of the same shape>]}]}``
``/incidents/{attribution_id}``     one verdict; first screen: the verdict and culprit, the
                                    action to decide first (approve / reject when logged
                                    in), the cost, link-outs; below: reasoning, timeline,
                                    alternatives, symptoms, back-dated spans, scheduler
                                    states, remediation, evidence with its log lines,
                                    coverage, revisions
``/fabric``                         switches and ports with faults over time, cables, jobs hit
``/node?host=H[&cluster=C]``        a node's faults, verdicts, remediation, certifications
``/remediations``                   the remediation queue (``state``: active by default)
``/healthz``                        ``ok`` when the store answers
``/static/...``                     the packaged CSS and JS
``/login`` (GET, POST)              only with commands allowed: name + token -> session
``/logout`` (POST)                  only with commands allowed
``/remediations/{id}/decide``       POST, only with commands allowed and a logged-in session:
                                    ``command`` (approve | reject), ``reason``, ``csrf``,
                                    ``back`` (optional: the incident page to return to)
==================================  ==============================================================

Read-only by default: without ``allow_commands`` no write route exists (a ``POST`` is answered
405) and no session cookie is set. With it (and a command key, and at least one UI user), a
decision needs a session from ``/login`` and passes three checks before anything is signed:
the session's CSRF token in the form (compared in constant time), an ``Origin`` header (when
the browser sends one) equal to the explorer's own origin, and ``Sec-Fetch-Site`` (when sent)
``same-origin``; the session cookie is ``SameSite=Strict`` and ``HttpOnly``. The decision then
goes through :func:`streams.ui.commands.decide`: the CLI's state checks, the command key's
signature and the ``remediation-commands`` topic.

Every response carries a Content-Security-Policy that allows only the explorer's own script
and stylesheet (no inline script), ``X-Content-Type-Options: nosniff``, ``Referrer-Policy:
same-origin`` (with ``no-referrer`` a browser sends ``Origin: null`` on a form POST, which the
origin check refuses) and ``frame-ancestors 'none'``. Text from logs reaches pages only through the
autoescaping templates (``streams.ui.render``) and the JS sets it with ``textContent``.
"""

from __future__ import annotations

import hmac
import re
import secrets
import time
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib import metadata
from typing import Any
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from streams.remediation.cli import ACTIVE
import streams.ui.views as views
from streams.ui.commands import CommandPublisher, DecisionRefused, PublishFailed, decide
from streams.ui.queries import IncidentFilter, IncidentRow, IncidentStore, StoreError
from streams.ui.render import Links, render
from streams.ui.settings import UISettings, UISettingsError

__all__ = ["LIST_HEADERS", "build_publisher", "create_ui_app", "group_row", "list_row"]

_LINKS = Links()
_MAX_PARAM = 200
_STATES = ("proposed", "approved", "executing", "done", "failed", "rejected", "expired", "cancelled")
_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
LIST_HEADERS = ("decided (UTC)", "status", "scope", "root cause", "domain", "quality", "confidence",
                "culprits", "symptoms")


def _version() -> str:
    try:
        return metadata.version("faultstream")
    except metadata.PackageNotFoundError:
        return "dev"


@dataclass
class AuthView:
    """What a page knows of the person: whether decisions are possible at all (``enabled``),
    who is logged in, their CSRF token, and where decisions go."""

    enabled: bool = False
    user: str = ""
    csrf: str = ""
    key_id: str = ""
    topic: str = ""

    @property
    def can_decide(self) -> bool:
        return self.enabled and bool(self.user)


class _SecurityHeaders:
    """ASGI middleware: the security headers of the module docstring on every response."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def wrapped(message: dict) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                have = {k.lower() for k, _ in headers}
                for name, value in ((b"content-security-policy", _CSP), (b"x-content-type-options", "nosniff"),
                                    (b"referrer-policy", "same-origin"), (b"x-frame-options", "DENY")):
                    if name not in have:
                        headers.append((name, value.encode()))
                if b"cache-control" not in have and not scope["path"].startswith("/static/"):
                    headers.append((b"cache-control", b"no-store"))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, wrapped)


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def list_row(row: IncidentRow, links: Links = _LINKS) -> dict[str, Any]:
    """One verdict's row as the page and ``/api/incidents`` show it: ``cells`` in the order
    of :data:`LIST_HEADERS`, each ``{"text", "href"?, "badge"?, "sub"?, "cls"?}``."""
    href = links.incident(row.attribution_id)
    culprits = ", ".join(row.culprit_hosts)
    if row.culprit_ranks:
        culprits += (" " if culprits else "") + "rank " + views.format_ranks(row.culprit_ranks)
    if row.culprit_ports:
        culprits += (" " if culprits else "") + ", ".join(row.culprit_ports)
    return {
        "id": row.attribution_id,
        "revision": row.revision,
        "classes": f"status-{row.status}",
        "cells": [
            {"text": views.format_ts(row.decided_at), "cls": "nowrap small"},
            {"text": row.status, "badge": f"s-{row.status}"},
            {"text": f"{row.scope_kind} {row.scope_id}", "href": href, "sub": row.cluster},
            {"text": row.root_cause_code or "(withdrawn)", "href": href, "sub": _cut(row.root_cause_text, 160), "cls": "mono"},
            {"text": row.domain},
            {"text": row.quality, "badge": f"q-{row.quality}"},
            {"text": f"{row.confidence:.2f}", "cls": "num"},
            {"text": culprits or "-", "cls": "small"},
            {"text": str(row.symptom_count), "cls": "num"},
        ],
        "verdict": row.as_json(),
    }


def group_row(group: views.ListGroup, links: Links = _LINKS) -> dict[str, Any]:
    """One incident of the list: its head verdict's row (:func:`list_row`) with ``group``
    (the incident key) and ``members``, the rows of its other verdicts."""
    return {**list_row(group.head, links), "group": group.key, "members": [list_row(m, links) for m in group.members]}


def build_publisher(settings: UISettings) -> CommandPublisher:
    """The command publisher of ``settings``: the command keys of the environment
    (``FAULTSTREAM_COMMAND_*``), the Kafka settings (``KAFKA_*``, ``settings.bootstrap``
    overriding the servers) and the ``remediation-commands`` topic under the prefix. Raises
    :class:`UISettingsError` when there is no key to sign with or a setting is invalid."""
    from pydantic import ValidationError

    from schemas.topics import catalogue
    from streams.command_auth import CommandKeyError, CommandKeySettings
    from transport.kafka_settings import KafkaSettingsError, kafka_settings

    try:
        keyring = CommandKeySettings().keyring()
        keyring.signing_key_id()
        kafka = kafka_settings(settings.bootstrap)
    except ValidationError as exc:
        raise UISettingsError("command key settings: " + "; ".join(e["msg"] for e in exc.errors())) from None
    except (CommandKeyError, KafkaSettingsError) as exc:
        raise UISettingsError(str(exc)) from None
    except ValueError as exc:  # pydantic-settings' SettingsError: FAULTSTREAM_COMMAND_KEYS not JSON
        raise UISettingsError(f"command key settings: {exc}") from None
    topic = catalogue(settings.topic_prefix)["remediation-commands"].name
    return CommandPublisher(keyring, kafka, topic, timeout_s=settings.command_timeout_s)


def _param(request: Request, name: str) -> str:
    value = request.query_params.get(name, "").strip()
    if len(value) > _MAX_PARAM:
        raise HTTPException(400, f"parameter {name} is longer than {_MAX_PARAM} characters")
    return value


def _time_param(request: Request, name: str) -> tuple[str, int | None]:
    """(text, UTC ns) of an ISO 8601 query parameter; ValueError names a bad one."""
    from streams.sources import parse_time

    text = _param(request, name)
    return text, (parse_time(text) if text else None)


#: Where a decision may send the browser back to: an incident page of this explorer.
_BACK_RE = re.compile(r"/incidents/[A-Za-z0-9_.-]{1,200}")


class _Explorer:
    """The explorer's request handlers over ``store`` (see :func:`create_ui_app`)."""

    def __init__(self, settings: UISettings, store: IncidentStore, publisher: CommandPublisher | None,
                 users: dict[str, bytes], clock: Callable[[], int] = time.time_ns) -> None:
        self.settings = settings
        self.clock = clock
        self.link_templates = settings.link_templates()
        self.store = store
        self.publisher = publisher
        self.users = users
        self.version = _version()
        self.commands = publisher is not None

    def session(self, request: Request) -> dict[str, Any]:
        return request.session if self.commands else {}

    def auth_of(self, request: Request) -> AuthView:
        if not self.commands:
            return AuthView()
        s = request.session
        if "csrf" not in s:
            s["csrf"] = secrets.token_urlsafe(32)
        publisher = self.publisher
        return AuthView(True, s.get("user", ""), s["csrf"], publisher.keyring.signing_key_id(), publisher.topic)

    def page(self, request: Request, template: str, name: str, status_code: int = 200, **kw: Any) -> HTMLResponse:
        flashes = self.session(request).pop("flash", []) if self.commands else []
        ctx = {"links": _LINKS, "auth": self.auth_of(request), "page": name, "flashes": flashes,
               "version": self.version, "csp": "", "in_report": False, "report_title": "", **kw}
        return HTMLResponse(render(template, ctx), status_code=status_code)

    def flash(self, request: Request, kind: str, text: str) -> None:
        request.session.setdefault("flash", []).append([kind, text])

    def error_page(self, request: Request, status_code: int, heading: str, message: str) -> HTMLResponse:
        return self.page(request, "error.html", "error", status_code=status_code, status_code_=status_code,
                         heading=heading, message=message)

    # -- the incident list --------------------------------------------------------------------

    def _filter(self, request: Request) -> tuple[IncidentFilter, dict[str, str]]:
        since, since_ns = _time_param(request, "since")
        until, until_ns = _time_param(request, "until")
        limit = _param(request, "limit")
        flt = IncidentFilter(cluster=_param(request, "cluster"), domain=_param(request, "domain"),
                             root_cause=_param(request, "root_cause"), quality=_param(request, "quality"),
                             status=_param(request, "status"), scope_kind=_param(request, "scope"),
                             since_ns=since_ns, until_ns=until_ns,
                             limit=int(limit) if limit.isdigit() else 200)
        shown = {"cluster": flt.cluster, "domain": flt.domain, "root_cause": flt.root_cause,
                 "quality": flt.quality, "status": flt.status, "scope": flt.scope_kind, "since": since,
                 "until": until}
        return flt, shown

    def incident_list(self, request: Request) -> HTMLResponse:
        error = ""
        try:
            flt, shown = self._filter(request)
        except ValueError as exc:
            error = str(exc)
            flt, shown = IncidentFilter(), {}
        verdicts = self.store.incidents(flt)
        rows = [group_row(g) for g in views.group_rows(verdicts)]
        query = urlencode({k: v for k, v in shown.items() if v})
        return self.page(request, "list.html", "list", status_code=400 if error else 200, rows=rows, flt=flt,
                         verdict_count=len(verdicts), summary=self.fleet(),
                         facets=self.store.facets(), since=shown.get("since", ""), until=shown.get("until", ""),
                         error=error, headers=LIST_HEADERS, poll_s=self.settings.poll_s,
                         live_url="/api/incidents" + (f"?{query}" if query else ""))

    def fleet(self) -> views.FleetSummary:
        """The fleet summary at the clock's now (see :func:`streams.ui.views.fleet_summary`)."""
        now = self.clock()
        since = min(now - now % (86_400 * views.NS), now - views.OPEN_WITHOUT_ACTION_NS)
        incidents = self.store.incident_costs(since)
        open_actions = self.store.actions(states=list(ACTIVE))
        executing = [a.action_id for a in open_actions if a.state == "executing"]
        executed = views.executed_actions(self.store.transitions(executing))
        with_actions = self.store.incidents_with_actions([i.key for i in incidents])
        return views.fleet_summary(incidents, open_actions, with_actions, executed, now)

    def api_incidents(self, request: Request) -> JSONResponse:
        try:
            flt, _ = self._filter(request)
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        verdicts = self.store.incidents(flt)
        rows = [group_row(g) for g in views.group_rows(verdicts)]
        return JSONResponse({"count": len(rows), "verdicts": len(verdicts),
                             "refreshed": time.strftime("%H:%M:%S", time.gmtime()), "rows": rows})

    # -- one verdict --------------------------------------------------------------------------

    def incident(self, request: Request) -> HTMLResponse:
        aid = request.path_params["attribution_id"]
        if len(aid) > _MAX_PARAM:
            raise HTTPException(404, "no such verdict")
        att = self.store.attribution(aid)
        if att is None:
            raise HTTPException(404, f"no verdict {aid} in the store")
        events = self.store.events(views.incident_event_ids(att))
        observations = self.store.observations(views.incident_observation_ids(att))
        members = self.store.attributions(att.members) if att.members else []
        actions = self.store.actions(attribution_ids=[aid], incident_ids=[att.incident_id] if att.incident_id else [])
        transitions = self.store.transitions([a.action_id for a in actions])
        v = views.incident_view(att, events, observations, revisions=self.store.revisions(aid), actions=actions,
                                transitions=transitions, members=members, link_templates=self.link_templates,
                                now_ns=self.clock())
        return self.page(request, "incident.html", "incident", v=v)

    # -- fabric, node, remediation ------------------------------------------------------------

    def fabric(self, request: Request) -> HTMLResponse:
        error = ""
        cluster = _param(request, "cluster")
        try:
            since, since_ns = _time_param(request, "since")
            until, until_ns = _time_param(request, "until")
        except ValueError as exc:
            error, since, until, since_ns, until_ns = str(exc), "", "", None, None
        f = views.fabric_view(self.store.fabric_verdicts(cluster, since_ns, until_ns))
        return self.page(request, "fabric.html", "fabric", status_code=400 if error else 200, f=f, cluster=cluster,
                    clusters=self.store.facets().clusters, since=since, until=until, error=error)

    def node(self, request: Request) -> HTMLResponse:
        host = _param(request, "host")
        cluster = _param(request, "cluster")
        if not host:
            raise HTTPException(400, "name a node: /node?host=node-a01")
        verdicts = self.store.node_verdicts(host, cluster)
        actions = self.store.actions(host=host, cluster=cluster)
        n = views.node_view(host, cluster, verdicts, actions, self.store.transitions([a.action_id for a in actions]),
                            self.store.certifications(host, cluster), self.store.node_event_counts(host, cluster))
        cause_times = {a.attribution_id: views.cause_time(a) for a in verdicts}
        return self.page(request, "node.html", "node", n=n, cause_times=cause_times)

    def remediations(self, request: Request) -> HTMLResponse:
        state = _param(request, "state") or "active"
        cluster = _param(request, "cluster")
        if state == "active":
            states: list[str] | None = list(ACTIVE)
        elif state == "all":
            states = None
        elif state in _STATES:
            states = [state]
        else:
            raise HTTPException(400, f"unknown state {state!r}: active, all or one of {', '.join(_STATES)}")
        actions = self.store.actions(states=states, cluster=cluster)
        transitions = self.store.transitions([a.action_id for a in actions])
        vs = sorted(views.action_views(actions, transitions), key=lambda v: (-v.action.updated_at, v.action.action_id))
        return self.page(request, "remediations.html", "remediations", views=vs, state=state, cluster=cluster,
                    clusters=self.store.facets().clusters)

    def healthz(self, request: Request) -> PlainTextResponse:
        self.store.facets()
        return PlainTextResponse("ok")

    # -- authentication and decisions (only with commands allowed) -----------------------------------

    def same_origin(self, request: Request) -> bool:
        origin = request.headers.get("origin")
        if origin is not None and origin != f"{request.url.scheme}://{request.url.netloc}":
            return False
        site = request.headers.get("sec-fetch-site")
        return site is None or site in ("same-origin", "none")

    async def checked_form(self, request: Request) -> dict[str, str]:
        """The POSTed form after the CSRF and origin checks; HTTPException 403 otherwise."""
        if not self.same_origin(request):
            raise HTTPException(403, "cross-origin request refused")
        form = await request.form(max_files=0, max_fields=10, max_part_size=16_384)
        token = form.get("csrf")
        expected = request.session.get("csrf")
        if not isinstance(token, str) or not expected or not hmac.compare_digest(token.encode(), expected.encode()):
            raise HTTPException(403, "missing or wrong CSRF token: reload the page and try again")
        return {k: v for k, v in form.items() if isinstance(v, str)}

    def login_form(self, request: Request) -> HTMLResponse:
        return self.page(request, "login.html", "login", error="")

    async def login(self, request: Request) -> Response:
        form = await self.checked_form(request)
        name, token = form.get("name", "").strip(), form.get("token", "")
        known = self.users.get(name)
        # compare against a dummy for unknown names so both paths cost the same
        ok = hmac.compare_digest(token.encode(), known if known is not None else secrets.token_bytes(32))
        if known is None or not ok:
            return self.page(request, "login.html", "login", status_code=401, error="wrong name or token")
        request.session.clear()
        request.session["user"] = name
        request.session["csrf"] = secrets.token_urlsafe(32)
        self.flash(request, "ok", f"logged in as {name}")
        return RedirectResponse("/remediations", status_code=303)

    async def logout(self, request: Request) -> Response:
        await self.checked_form(request)
        request.session.clear()
        return RedirectResponse("/", status_code=303)

    async def decide_route(self, request: Request) -> Response:
        from starlette.concurrency import run_in_threadpool

        user = request.session.get("user")
        if not user:
            raise HTTPException(403, "log in to approve or reject: no session")
        form = await self.checked_form(request)
        action_id = request.path_params["action_id"]
        command = form.get("command", "")
        back = form.get("back", "")
        back = back if _BACK_RE.fullmatch(back) else "/remediations"
        try:
            action = await run_in_threadpool(self.store.action, action_id)
            sent = await run_in_threadpool(decide, command, action, action_id, by=user,
                                           reason=form.get("reason", ""), publish=self.publisher.publish)
        except DecisionRefused as exc:
            self.flash(request, "err", f"not sent: {exc}")
            return RedirectResponse(back, status_code=303)
        except PublishFailed as exc:
            self.flash(request, "err", f"signed but not sent: {exc}")
            return RedirectResponse(back, status_code=303)
        self.flash(request, "ok", f"{command} of {action_id} by {user}: {sent.command.command_id} signed with key "
                             f"{sent.command.key_id} and sent to {sent.topic}; the worker records the transition")
        return RedirectResponse(back, status_code=303)

    # -- errors and assembly --------------------------------------------------------------------

    async def http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": exc.detail}, status_code=exc.status_code)
        headings = {400: "Bad request", 403: "Refused", 404: "Not found", 405: "Not allowed"}
        message = exc.detail
        if exc.status_code == 405:
            message = "This explorer is read-only: start it with --allow-commands (and a command key) to decide."
        return self.error_page(request, exc.status_code, headings.get(exc.status_code, "Error"), message)

    async def store_error(self, request: Request, exc: Exception) -> Response:
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": str(exc)}, status_code=503)
        return self.error_page(request, 503, "The store did not answer", str(exc))


def create_ui_app(settings: UISettings, *, store: IncidentStore | None = None,
                  publisher: CommandPublisher | None = None, clock: Callable[[], int] = time.time_ns) -> Starlette:
    """The explorer over ``store`` (default: opened from ``settings.clickhouse``; closed when
    the app shuts down only if opened here). With ``settings.allow_commands``: the UI users of
    ``settings.users()`` (at least one) and ``publisher`` (default :func:`build_publisher`).
    ``clock``: now as UTC ns (what the fleet summary's "today" and a proposal's expiry are
    measured against).
    Raises :class:`UISettingsError` for settings it cannot start with and
    :class:`streams.ui.queries.StoreError` when the store cannot be opened."""
    users: dict[str, bytes] = {}
    if settings.allow_commands:
        users = settings.users()
        if not users:
            raise UISettingsError("--allow-commands needs at least one UI user: set FAULTSTREAM_UI_TOKENS "
                                  '(JSON {"<name>": "<token>"}) or FAULTSTREAM_UI_TOKEN_FILE')
        publisher = publisher or build_publisher(settings)
    else:
        publisher = None
    own_store = store is None
    store = store or IncidentStore(settings.clickhouse, database=settings.database)
    h = _Explorer(settings, store, publisher, users, clock)

    routes = [
        Route("/", h.incident_list),
        Route("/api/incidents", h.api_incidents),
        Route("/incidents/{attribution_id}", h.incident),
        Route("/fabric", h.fabric),
        Route("/node", h.node),
        Route("/remediations", h.remediations),
        Route("/healthz", h.healthz),
        Mount("/static", StaticFiles(packages=[("streams.ui", "static")]), name="static"),
    ]
    middleware = [Middleware(_SecurityHeaders)]
    if h.commands:
        routes += [
            Route("/login", h.login_form, methods=["GET"]),
            Route("/login", h.login, methods=["POST"]),
            Route("/logout", h.logout, methods=["POST"]),
            Route("/remediations/{action_id}/decide", h.decide_route, methods=["POST"]),
        ]
        secret = (settings.session_secret.get_secret_value() if settings.session_secret is not None
                  else secrets.token_urlsafe(48))
        middleware.append(Middleware(SessionMiddleware, secret_key=secret, session_cookie="faultstream_ui",
                                     max_age=settings.session_max_age_s, same_site="strict",
                                     https_only=settings.secure_cookies))

    @asynccontextmanager
    async def lifespan(app: Starlette):
        yield
        if own_store:
            store.close()

    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan,
                    exception_handlers={HTTPException: h.http_error, StoreError: h.store_error})
    app.state.store = store
    app.state.settings = settings
    return app


def serve(settings: UISettings, *, log_level: str = "info", announce: Callable[[], None] | None = None) -> None:
    """Serve the explorer on ``settings.host:settings.port`` with uvicorn until SIGINT /
    SIGTERM; ``announce()`` is called once the store is open and the port bound. Raises
    :class:`UISettingsError` or :class:`streams.ui.queries.StoreError` before listening when the
    settings or the store are unusable, ``OSError`` when the port cannot be bound (taken, or
    not an address of this host)."""
    import socket

    import uvicorn

    app = create_ui_app(settings)
    sock = socket.socket(socket.AF_INET6 if ":" in settings.host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((settings.host, settings.port))
    except OSError:
        sock.close()
        raise
    if announce is not None:
        announce()
    config = uvicorn.Config(app, log_level=log_level, access_log=False, server_header=False, proxy_headers=False)
    uvicorn.Server(config).run(sockets=[sock])
