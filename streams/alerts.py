"""Verdicts as Alertmanager alerts, in the worker (the alerts and their labels:
:mod:`sinks.alertmanager`).

Data flow in the worker, beside remediation and with the same shape::

    <prefix>.attributions (every verdict, any scope) -- agent alerts_attributions --\\
    <prefix>.certifications (a node passed: back in service) -- alerts_certifications -+
    timer (every hold_s / 3)                         -- TickMessage -----------------+
        -> <app_id>-by-cluster-alerts (internal, key = cluster, a typed
           schemas.messages.AlertMessage)
        -> agent alerts: one AlertMachine per cluster over an AlertBook whose state is kept in
           the changelogged table ``alert_state`` (cluster -> the alert each verdict has firing
           and the hosts' last passing certification)
        -> POST <FAULTSTREAM_ALERTS_URL>/api/v2/alerts

A message's alerts are posted before the book is saved, and the agent waits (retrying every
``retry_s`` seconds, tenacity) while Alertmanager is unreachable: nothing is committed
meanwhile, and a worker asked to stop then exits without committing, so the input is read
again at the next start. Posting an alert twice is harmless (an alert's identity is its label
set, a function of the verdict), and the book comes back from the changelog after a restart or
a rebalance, so a revision whose labels changed still resolves the alert of the revision
before it: a restart never duplicates an alert. A request Alertmanager refuses (HTTP 4xx)
dead-letters the input with the reason and saves nothing.

Bad input (a verdict or certification that does not validate) is dead-lettered with the reason
(``agent.alerts``; by this part only when remediation is off, since the remediation agents read
the same topics and dead-letter the same record once); a tombstone on the attributions topic is
skipped (the withdrawn revision before it resolved the alert).

Settings (``FAULTSTREAM_ALERTS_*``, :class:`AlertSettings`); without ``FAULTSTREAM_ALERTS_URL``
the whole part is off.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from tenacity import AsyncRetrying, retry_if_exception_type, wait_fixed

from correlators.keyed import Effect, Execute
from schemas.deadletter import reason_of
from schemas.messages import (
    CertificationInMessage,
    TickMessage,
    VerdictInMessage,
    message_json,
    parse_alert_message,
)
from schemas.records import Attribution, Certification, canonical_json
from schemas.utc import parse_utc
from sinks.alertmanager import AlertBook, AlertmanagerClient, AlertmanagerError, AlertmanagerUnavailable

__all__ = ["AlertSettings", "AlertMachine", "AlertsAgent", "attach_alerts", "alerts_topic_name", "alerts_topic_spec", "TABLE"]

log = logging.getLogger("faultstream.alerts")

#: The changelogged table of the alerts agent.
TABLE = "alert_state"
#: ``source`` of this part's dead letters.
SOURCE = "agent.alerts"


class AlertSettings(BaseSettings):
    """Alert settings of the worker, from ``FAULTSTREAM_ALERTS_*``:

    ================================  ==========================================================
    variable                          meaning (default)
    ================================  ==========================================================
    FAULTSTREAM_ALERTS_URL            Alertmanager base URL, e.g. ``http://alertmanager:9093``
                                      (unset: no alerts)
    FAULTSTREAM_ALERTS_PROVISIONAL    alert provisional verdicts too (``false``: final only)
    FAULTSTREAM_ALERTS_EXPLORER_URL   base URL of the explorer (``faultstream ui``) for each
                                      alert's link (unset: no link)
    FAULTSTREAM_ALERTS_HOLD_S         seconds ahead of now each firing alert's ``endsAt`` is set;
                                      re-posted every third of it (3600)
    FAULTSTREAM_ALERTS_TIMEOUT_S      one request's timeout, s (5)
    FAULTSTREAM_ALERTS_ATTEMPTS       tries of one request before the agent waits (3)
    FAULTSTREAM_ALERTS_RETRY_S        seconds between two tries of a batch Alertmanager did not
                                      take, while it is unreachable (2)
    FAULTSTREAM_ALERTS_HEADERS        JSON ``{"Authorization": "Bearer ..."}``: extra headers
                                      (an authenticating proxy in front of Alertmanager)
    ================================  ==========================================================
    """

    model_config = SettingsConfigDict(env_prefix="FAULTSTREAM_ALERTS_", extra="ignore")

    url: str | None = None
    provisional: bool = False
    explorer_url: str | None = None
    hold_s: float = Field(default=3600.0, ge=3.0)
    timeout_s: float = Field(default=5.0, gt=0)
    attempts: int = Field(default=3, ge=1)
    retry_s: float = Field(default=2.0, gt=0)
    headers: dict[str, str] = Field(default_factory=dict)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value and not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r}: expected an http:// or https:// URL, e.g. http://alertmanager:9093")
        return value

    def client(self) -> AlertmanagerClient:
        """The HTTP client of :attr:`url`. Raises ``ValueError`` when it is unset."""
        if not self.url:
            raise ValueError("FAULTSTREAM_ALERTS_URL is not set")
        return AlertmanagerClient(self.url, timeout_s=self.timeout_s, attempts=self.attempts, headers=self.headers)

    def book(self, state: Any = None) -> AlertBook:
        """A cluster's :class:`AlertBook` with these options, from its table state (None: new)."""
        return AlertBook.from_state(state, provisional=self.provisional, hold_s=self.hold_s,
                                    explorer_url=self.explorer_url)


class AlertMachine:
    """One cluster's alerts as a keyed state machine (:class:`correlators.keyed.Keyed`) of the
    ``alerts`` channel (key: cluster): :meth:`apply` takes one :data:`schemas.messages.AlertMessage`
    and returns ``[Execute(cluster, "alerts", alerts)]`` with the ``postableAlert`` list to
    post (none when nothing changed). ``clock``: UTC ns now (alert times are wall-clock)."""

    def __init__(self, cluster: str, book: AlertBook, clock: Callable[[], int] = time.time_ns) -> None:
        self.cluster = cluster
        self.book = book
        self.clock = clock

    def to_state(self) -> dict[str, Any]:
        """The book's state (JSON data)."""
        return self.book.to_state()

    def apply(self, message: Any, now: float = 0.0) -> list[Effect]:
        """See the class docstring. Raises ``KeyError`` for a message of another type."""
        at = self.clock()
        if isinstance(message, VerdictInMessage):
            alerts = self.book.verdict(message.attribution, at)
        elif isinstance(message, CertificationInMessage):
            alerts = self.book.certification(message.certification, at)
        elif isinstance(message, TickMessage):
            alerts = self.book.refresh(at)
        else:
            raise KeyError(type(message).__name__)
        return [Execute(self.cluster, "alerts", alerts)] if alerts else []


def alerts_topic_name(app_id: str) -> str:
    """The internal topic of the alerts agent: ``<app_id>-by-cluster-alerts``."""
    return f"{app_id}-by-cluster-alerts"


def alerts_topic_spec(settings: Any) -> Any:
    """The :class:`schemas.topics.TopicSpec` of the internal topic (``settings``: a
    ``WorkerSettings``), for ``streams.app.internal_topic_specs``."""
    from schemas.topics import TopicSpec

    return TopicSpec(
        name=alerts_topic_name(settings.app_id), key="cluster", value_schema=None,
        partitions=settings.partitions, cleanup_policy="delete",
        description="verdicts, certifications and refresh ticks re-keyed by cluster for the Alertmanager alerts",
    )


DeadLetterFn = Callable[[str, str, bytes | None, Any], Awaitable[None]]


class AlertsAgent:
    """The body of the alerts agent, one record of ``<app_id>-by-cluster-alerts`` at a time
    (:meth:`handle`): decode, load the cluster's :class:`AlertMachine` from ``table`` (cluster ->
    book state; a changelogged Faust table in the worker), apply, post its alerts (waiting while
    Alertmanager is unavailable), then save the state when it changed.

    ``settings``: :class:`AlertSettings`; ``client``: its :class:`AlertmanagerClient`;
    ``dead_letter``: the worker's dead-letter sender; ``metrics``: the worker's ``Metrics``
    (counters are added to its registry); ``stop``: set when the worker is asked to stop (the
    wait for Alertmanager ends, then ``exit_without_commit(reason)`` is called and
    :class:`AlertmanagerUnavailable` raised); ``stopping``: another stop condition (the app's)."""

    def __init__(self, table: Any, settings: AlertSettings, client: AlertmanagerClient, *, dead_letter: DeadLetterFn,
                 metrics: Any, stop: asyncio.Event, exit_without_commit: Callable[[str], Any],
                 stopping: Callable[[], bool] = lambda: False) -> None:
        from prometheus_client import Counter

        self.table = table
        self.settings = settings
        self.client = client
        self.dead_letter = dead_letter
        self.stop = stop
        self.exit_without_commit = exit_without_commit
        self.stopping = lambda: stop.is_set() or stopping()
        registry = metrics.registry
        self.posted = Counter("faultstream_alerts_posted_total", "alerts posted to Alertmanager, by state "
                              "(firing | resolved)", ["state"], registry=registry)
        self.errors = Counter("faultstream_alertmanager_errors_total", "Alertmanager requests that failed after "
                              "their retries (unavailable) or were refused (refused)", ["kind"], registry=registry)
        self.outcome = {o: metrics.inputs.labels("alerts", o) for o in ("processed", "dead_lettered")}

    async def _wait(self, seconds: float) -> None:
        # the back-off ends early when the worker is asked to stop
        try:
            await asyncio.wait_for(self.stop.wait(), timeout=seconds)
        except asyncio.TimeoutError:
            pass

    def _warn(self, state: Any) -> None:
        self.errors.labels("unavailable").inc()
        log.warning("alerts: %s; retrying in %g s", state.outcome.exception(), self.settings.retry_s)

    async def post(self, alerts: list[dict[str, Any]]) -> None:
        """Post ``alerts`` until Alertmanager takes them (tenacity, every ``retry_s``). Raises
        :class:`AlertmanagerError` when Alertmanager refuses them, AlertmanagerUnavailable
        after ``exit_without_commit`` when asked to stop while they wait."""
        loop = asyncio.get_running_loop()
        try:
            async for attempt in AsyncRetrying(retry=retry_if_exception_type(AlertmanagerUnavailable),
                                               wait=wait_fixed(self.settings.retry_s),
                                               stop=lambda _: self.stopping(), sleep=self._wait,
                                               before_sleep=self._warn, reraise=True):
                with attempt:
                    await loop.run_in_executor(None, self.client.post, alerts)
        except AlertmanagerUnavailable as exc:
            # asked to stop while the alerts wait: exit without committing their input
            self.errors.labels("unavailable").inc()
            self.exit_without_commit(f"stopping while {len(alerts)} alerts wait for Alertmanager ({exc})")
            raise
        now = time.time_ns()
        for alert in alerts:
            self.posted.labels("firing" if parse_utc(alert["endsAt"]) > now else "resolved").inc()

    async def handle(self, item: Any) -> None:
        """One record (``item.key``: the cluster, ``item.value``: an AlertMessage's JSON,
        ``item.message``: its position); see the class docstring. A record that does not decode,
        or whose alerts Alertmanager refuses, is dead-lettered with the reason and saves nothing."""
        cluster = (item.key or b"").decode("utf-8", "replace")
        try:
            message = parse_alert_message(item.value or b"")
        except (ValueError, ValidationError) as exc:
            return await self._refuse(f"invalid message: {reason_of(exc)}", item)
        machine = AlertMachine(cluster, self.settings.book(self.table.get(cluster)))
        before = canonical_json(machine.to_state())
        try:
            for effect in machine.apply(message):
                await self.post(effect.job)
        except AlertmanagerUnavailable:
            raise
        except AlertmanagerError as exc:
            self.errors.labels("refused").inc()
            return await self._refuse(f"refused by Alertmanager: {exc}", item)
        state = machine.to_state()
        if canonical_json(state) != before:
            self.table[cluster] = state
        self.outcome["processed"].inc()

    async def _refuse(self, reason: str, item: Any) -> None:
        await self.dead_letter(SOURCE, reason, item.value, item.message)
        self.outcome["dead_lettered"].inc()


def _attach_inputs(app: Any, settings: Any, attributions_topic: Any, *,
                   route: Callable[[str, Any], Awaitable[None]], dead_letter: DeadLetterFn, provisional: bool) -> None:
    """The agents that turn the verdicts (final ones, and provisional ones when
    ``provisional``) and the passed certifications into the alerts machine's messages,
    sent by ``route(cluster, message)``."""
    # the remediation agents read the same topics and dead-letter what does not validate
    remediation_reads_verdicts = bool(getattr(settings, "remediation", True))

    @app.agent(attributions_topic, name=f"{__name__}.alerts_attributions")
    async def alerts_attributions(stream: Any) -> None:
        async for item in stream.events():
            if item.value is None:
                continue  # the tombstone after a withdrawal, which resolved the alert
            try:
                att = Attribution.model_validate_json(item.value)
            except (ValueError, ValidationError) as exc:
                if not remediation_reads_verdicts:  # else its agent dead-letters the same record
                    await dead_letter(SOURCE, f"invalid attribution: {reason_of(exc)}", item.value, item.message)
                continue
            if att.status == "provisional" and not provisional:
                continue
            await route(att.scope.cluster, VerdictInMessage(attribution=att))

    certifications = app.topic(settings.topic("certifications"), value_serializer="raw", key_serializer="raw")

    @app.agent(certifications, name=f"{__name__}.alerts_certifications")
    async def alerts_certifications(stream: Any) -> None:
        async for item in stream.events():
            if item.value is None:
                continue
            try:
                cert = Certification.model_validate_json(item.value)
            except (ValueError, ValidationError) as exc:
                if not remediation_reads_verdicts:
                    await dead_letter(SOURCE, f"invalid certification: {reason_of(exc)}", item.value, item.message)
                continue
            if cert.passed:
                await route(cert.cluster, CertificationInMessage(certification=cert))


def attach_alerts(app: Any, settings: Any, *, attributions_topic: Any, dead_letter: DeadLetterFn, metrics: Any,
                  exit_without_commit: Callable[[str], Any]) -> AlertSettings | None:
    """Add the alerts agents, table and timer to the Faust ``app`` (see the module docstring);
    nothing when ``FAULTSTREAM_ALERTS_URL`` is unset. Returns the settings used (None: off).

    ``settings``: the worker's ``WorkerSettings``; ``attributions_topic``: the app's topic
    object of ``<prefix>.attributions``; ``dead_letter(source, reason, original, message)``: the
    app's dead-letter sender; ``metrics``: the app's ``Metrics`` (its ``registry`` gets
    ``faultstream_alerts_posted_total{state}`` and ``faultstream_alertmanager_errors_total{kind}``);
    ``exit_without_commit(reason)``: ends the process when it is asked to stop while alerts
    wait for Alertmanager. Raises ``pydantic.ValidationError`` for bad settings."""
    asettings = AlertSettings()
    if not asettings.url:
        return None
    import faust

    client = asettings.client()
    raw = {"value_serializer": "raw", "key_serializer": "raw"}
    by_cluster = app.topic(alerts_topic_name(settings.app_id), internal=True, partitions=settings.partitions, **raw)
    json_schema = faust.Schema(key_type=str, value_type=None, key_serializer="json", value_serializer="json")
    table = app.Table(TABLE, default=None, partitions=settings.partitions, schema=json_schema)
    stop_event: asyncio.Event = getattr(app, "faultstream_stop", None) or asyncio.Event()
    agent = AlertsAgent(table, asettings, client, dead_letter=dead_letter, metrics=metrics, stop=stop_event,
                        exit_without_commit=exit_without_commit, stopping=lambda: bool(app.should_stop))
    log.info("alerts: to %s (provisional %s, hold %g s)", client.url, asettings.provisional, asettings.hold_s)

    async def route(cluster: str, message: Any) -> None:
        await by_cluster.send(key=cluster.encode(), value=message_json(message))

    @app.agent(by_cluster, name=f"{__name__}.alerts")
    async def alerts(stream: Any) -> None:
        # one record at a time: Faust writes the table's changelog only inside stream iteration
        async for item in stream.events():
            await agent.handle(item)

    _attach_inputs(app, settings, attributions_topic, route=route, dead_letter=dead_letter,
                   provisional=asettings.provisional)

    @app.timer(interval=max(1.0, asettings.hold_s / 3), name=f"{__name__}.refresh")
    async def refresh_alerts() -> None:
        if app.rebalancing or not app.tables.recovery.completed.is_set():
            return
        try:
            for cluster in sorted(table.keys()):
                if (table.get(cluster) or {}).get("firing"):
                    await route(cluster, TickMessage())
        except Exception:  # noqa: BLE001 -- a timer must never take the worker down
            log.exception("alerts refresh failed")

    return asettings

