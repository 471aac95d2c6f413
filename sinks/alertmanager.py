"""Verdicts as Alertmanager alerts (API v2, ``POST /api/v2/alerts``).

Source: the Alertmanager OpenAPI document (``api/v2/openapi.yaml`` of Alertmanager 0.25): a
``postableAlert`` is ``{"labels": {...}, "annotations": {...}, "startsAt", "endsAt",
"generatorURL"}`` with RFC 3339 times. An alert's identity is its label set (its fingerprint):
posting the same labels again updates that one alert, and an ``endsAt`` that is not in the
future resolves it. An alert posted without ``endsAt`` resolves by itself after the server's
``resolve_timeout`` (5 min by default); this module always sets ``endsAt`` (``now + hold_s``)
and the driver re-posts every firing alert before it passes (:meth:`AlertBook.refresh`).

Labels (:func:`verdict_labels`), all strings, all functions of the verdict's content, so the
same revision gives the same alert in any process, before or after a restart:

==============  =====================================================================
label           value
==============  =====================================================================
alertname       ``FaultstreamVerdict`` (workload), ``FaultstreamFabricFault``
                (fabric port), ``FaultstreamIncident`` (incident)
source          ``faultstream``
verdict_id      the verdict's ``attribution_id`` (stable over its revisions)
incident        the verdict's ``incident_id`` when it belongs to one (one fault across
                workloads: its workload, fabric-port and incident verdicts share it), else
                its ``attribution_id``: ``group_by: [incident]`` is one notification a fault
cluster         ``scope.cluster`` (left out when empty)
scope           ``workload`` | ``fabric_port`` | ``incident``; ``scope_id`` its id
domain          the verdict's domain; ``root_cause`` its cause code (``unknown``: none)
quality         ``definitive`` | ``probable`` | ``ambiguous`` | ``insufficient``
severity        ``critical`` (final, definitive or probable), else ``warning``
culprit_host    culprit hosts, sorted, comma-separated (left out when none)
culprit_gpu     ``<host>:<index|uuid|pci>`` of each culprit GPU when the verdict names one
                culprit host, else the GPU alone (left out when none)
culprit_port    culprit ports, sorted, comma-separated (left out when none)
==============  =====================================================================

Annotations: ``summary``, ``description`` (the first three reasoning lines), ``cost`` (GPU-hours
and node-hours lost, goodput lost for a slow job), ``explorer`` (the incident page, when an
explorer URL is configured; also the ``generatorURL``), ``revision``, ``status``,
``decided_at`` (UTC text).

What fires and what resolves (:class:`AlertBook`, one per cluster):

* a final verdict whose outcome is not ``completed`` fires; a provisional one fires only with
  ``provisional=True`` (the alerting policy);
* a revision whose labels differ (another cause, quality or culprit; provisional -> final
  changes ``severity``) resolves the alert of the previous revision and fires its own, so a
  verdict has at most one firing alert;
* a withdrawn or ``completed`` revision resolves it;
* a passing :class:`schemas.records.Certification` of every culprit host, finished after the
  verdict was decided, resolves it: the nodes are back in service.

Requests use httpx; transient failures (connection errors, timeouts, HTTP 5xx and 429) are
retried with exponential back-off (tenacity), then
:class:`AlertmanagerUnavailable` is raised; a refused request (other 4xx) raises
:class:`AlertmanagerError` at once.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Mapping

import httpx
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from schemas.records import Attribution, Certification, GpuRef
from schemas.utc import format_utc, parse_utc

__all__ = ["AlertmanagerClient", "AlertmanagerError", "AlertmanagerUnavailable", "AlertBook", "verdict_labels",
           "verdict_alert", "explorer_link", "ALERTNAMES", "SOURCE"]

log = logging.getLogger("faultstream.alertmanager")

#: ``scope.kind`` -> ``alertname`` label.
ALERTNAMES: dict[str, str] = {"workload": "FaultstreamVerdict", "fabric_port": "FaultstreamFabricFault",
                              "incident": "FaultstreamIncident"}
#: The ``source`` label of every alert faultstream posts.
SOURCE = "faultstream"
#: Reasoning sentences kept in the ``description`` annotation.
DESCRIPTION_SENTENCES = 3
#: Culprit hosts named in the ``summary`` before "and N more".
SUMMARY_HOSTS = 4


class AlertmanagerError(Exception):
    """Alertmanager refused a request (HTTP 4xx but 429, an unusable URL), or
    :class:`AlertmanagerUnavailable`."""


class AlertmanagerUnavailable(AlertmanagerError):
    """Alertmanager stayed unreachable (or answered 5xx / 429) after the retries: the same
    request may succeed later."""


class _Transient(Exception):
    """One failed try worth retrying (connection error, timeout, HTTP 5xx or 429)."""


def _gpu_text(gpu: GpuRef) -> str:
    if gpu.index is not None:
        return str(gpu.index)
    return gpu.uuid or gpu.pci_bus_id or "?"


def _joined(values: Iterable[str]) -> str:
    return ",".join(sorted(set(values)))


def verdict_labels(att: Attribution) -> dict[str, str]:
    """The label set of ``att``'s alert (see the module docstring); a function of the verdict
    alone. Empty values are left out (Alertmanager treats an empty label as absent)."""
    hosts = sorted(set(att.culprits.hosts))
    gpus = [f"{hosts[0]}:{_gpu_text(g)}" if len(hosts) == 1 else _gpu_text(g) for g in att.culprits.gpus]
    final_and_sure = att.status == "final" and att.quality in ("definitive", "probable")
    labels = {
        "alertname": ALERTNAMES[att.scope.kind],
        "source": SOURCE,
        "verdict_id": att.attribution_id,
        "incident": att.incident_id or att.attribution_id,
        "cluster": att.scope.cluster,
        "scope": att.scope.kind,
        "scope_id": att.scope.id,
        "domain": att.domain,
        "root_cause": att.cause_code or "unknown",
        "quality": att.quality,
        "severity": "critical" if final_and_sure else "warning",
        "culprit_host": _joined(hosts),
        "culprit_gpu": _joined(gpus),
        "culprit_port": _joined(att.culprits.ports),
    }
    return {k: v for k, v in labels.items() if v}


def _summary(att: Attribution) -> str:
    cause = att.root_cause.code if att.root_cause is not None else "no root cause named"
    hosts = sorted(set(att.culprits.hosts))
    where = ", ".join(hosts[:SUMMARY_HOSTS])
    if len(hosts) > SUMMARY_HOSTS:
        where += f" and {len(hosts) - SUMMARY_HOSTS} more"
    place = where or ", ".join(att.culprits.ports[:SUMMARY_HOSTS])
    scope = f"{att.scope.kind} {att.scope.id}" + (f" ({att.scope.cluster})" if att.scope.cluster else "")
    return (f"{att.outcome} {scope}: {cause}" + (f" on {place}" if place else "")
            + f"; {att.domain}, {att.quality}, {att.status}")


def _cost(att: Attribution) -> str:
    c = att.cost
    if c is None:
        return ""
    parts = []
    if c.gpu_hours_lost is not None:
        parts.append(f"{c.gpu_hours_lost:g} GPU-hours lost")
    parts.append(f"{c.node_hours_lost:g} node-hours lost")
    if c.goodput_lost_fraction is not None:
        parts.append(f"goodput {100 * c.goodput_lost_fraction:.0f}% lost")
    if c.ran_after_cause_s is not None:
        parts.append(f"noticed {c.ran_after_cause_s:g} s after the cause")
    return "; ".join(parts)


def explorer_link(att: Attribution, explorer_url: str) -> str:
    """The explorer's page of ``att``: ``<explorer_url>/incidents/<attribution_id>``."""
    return f"{explorer_url.rstrip('/')}/incidents/{att.attribution_id}"


def verdict_alert(att: Attribution, *, now_ns: int, hold_s: float, explorer_url: str | None = None) -> dict[str, Any]:
    """The firing ``postableAlert`` of ``att``: its labels, annotations, ``startsAt`` (the
    verdict's ``decided_at``, event time, or ``now_ns`` if earlier), ``endsAt`` = ``now_ns +
    hold_s`` seconds (UTC ns in, RFC 3339 text out)."""
    annotations = {
        "summary": _summary(att),
        "description": "\n".join(att.reasoning[:DESCRIPTION_SENTENCES]),
        "cost": _cost(att),
        "revision": str(att.revision),
        "status": att.status,
        "decided_at": format_utc(att.decided_at),
    }
    alert: dict[str, Any] = {
        "labels": verdict_labels(att),
        "annotations": {k: v for k, v in annotations.items() if v},
        "startsAt": format_utc(min(att.decided_at, now_ns)),
        "endsAt": format_utc(now_ns + int(hold_s * 1e9)),
    }
    if explorer_url:
        link = explorer_link(att, explorer_url)
        alert["annotations"]["explorer"] = link
        alert["generatorURL"] = link
    return alert


class AlertmanagerClient:
    """The call of the v2 API faultstream makes (``POST /api/v2/alerts``). ``url``: the Alertmanager base URL
    (``http://127.0.0.1:9093``); ``timeout_s``: one request's timeout (seconds); ``attempts``,
    ``retry_wait_s``, ``retry_max_wait_s``: tenacity back-off of transient failures;
    ``headers``: extra request headers (an ``Authorization`` for a proxy; never logged);
    ``verify``: TLS verification (a CA bundle path, or False)."""

    def __init__(self, url: str, *, timeout_s: float = 5.0, attempts: int = 5, retry_wait_s: float = 0.2,
                 retry_max_wait_s: float = 5.0, headers: Mapping[str, str] | None = None,
                 verify: bool | str = True) -> None:
        self.url = url.rstrip("/")
        self.attempts = attempts
        self.retry_wait_s = retry_wait_s
        self.retry_max_wait_s = retry_max_wait_s
        self._client = httpx.Client(timeout=timeout_s, headers=dict(headers or {}), verify=verify)

    def _request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        where = f"{method} {self.url}{path}"

        def once() -> httpx.Response:
            try:
                resp = self._client.request(method, self.url + path, **kw)
            except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
                raise _Transient(f"{type(exc).__name__}: {exc}") from exc
            except (httpx.HTTPError, httpx.InvalidURL) as exc:
                raise AlertmanagerError(f"{where}: {type(exc).__name__}: {exc}") from exc
            if resp.status_code >= 500 or resp.status_code == 429:
                raise _Transient(f"HTTP {resp.status_code}: {resp.text[:200]}")
            if not resp.is_success:
                raise AlertmanagerError(f"{where}: HTTP {resp.status_code}: {resp.text[:200]}")
            return resp

        try:
            for attempt in Retrying(stop=stop_after_attempt(max(1, self.attempts)),
                                    wait=wait_exponential(multiplier=self.retry_wait_s, max=self.retry_max_wait_s),
                                    retry=retry_if_exception_type(_Transient), reraise=True):
                with attempt:
                    return once()
        except _Transient as exc:
            raise AlertmanagerUnavailable(f"{where}: failed after {self.attempts} attempts: {exc}") from None
        raise AssertionError("unreachable")  # pragma: no cover -- Retrying returns or re-raises

    def post(self, alerts: list[dict[str, Any]]) -> None:
        """``POST /api/v2/alerts`` (nothing for an empty list). Raises AlertmanagerError."""
        if alerts:
            self._request("POST", "/api/v2/alerts", json=alerts)

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()


class AlertBook:
    """The alerts of one cluster's verdicts (see the module docstring): which alert each
    verdict has firing, and when each host last passed a certification. No I/O: each method
    returns the ``postableAlert`` list to post (firing and resolving) and updates the book as if
    it was posted; the caller posts it, then keeps :meth:`to_state` (the worker: a changelogged
    table), so a book rebuilt after a restart resolves what the process before it fired.

    ``provisional``: provisional verdicts fire too; ``hold_s``: how far ahead ``endsAt`` is set
    (seconds; :meth:`refresh` every ``hold_s / 3`` or sooner); ``explorer_url``: base URL of the
    explorer for the link. Times (``now_ns``) are UTC ns."""

    def __init__(self, *, provisional: bool = False, hold_s: float = 3600.0, explorer_url: str | None = None,
                 firing: Mapping[str, dict[str, Any]] | None = None, certified: Mapping[str, int] | None = None) -> None:
        self.provisional = provisional
        self.hold_s = hold_s
        self.explorer_url = explorer_url
        #: verdict id -> the alert last posted as firing
        self.firing: dict[str, dict[str, Any]] = dict(firing or {})
        #: host -> the latest passing certification's ``finished_at`` (UTC ns)
        self.certified: dict[str, int] = dict(certified or {})

    def to_state(self) -> dict[str, Any]:
        """The book as JSON data: ``{"firing": {verdict_id: alert}, "certified": {host: ns}}``."""
        return {"firing": self.firing, "certified": self.certified}

    @classmethod
    def from_state(cls, state: Mapping[str, Any] | None, **options: Any) -> "AlertBook":
        """A book from :meth:`to_state` data (None: an empty book) and the constructor's options."""
        state = state or {}
        return cls(firing=state.get("firing"), certified=state.get("certified"), **options)

    @staticmethod
    def _resolution(alert: dict[str, Any], now_ns: int) -> dict[str, Any]:
        return dict(alert, endsAt=format_utc(now_ns))

    def verdict(self, att: Attribution, now_ns: int) -> list[dict[str, Any]]:
        """What revision ``att`` changes. A provisional revision without ``provisional`` changes
        nothing (a firing final alert of the same verdict stays); a withdrawn or ``completed``
        one resolves the verdict's alert; any other fires its own alert, resolving the previous
        revision's when its labels differ."""
        if att.status == "provisional" and not self.provisional:
            return []
        vid = att.attribution_id
        old = self.firing.get(vid)
        alert = None
        if att.status != "withdrawn" and att.outcome != "completed":
            alert = verdict_alert(att, now_ns=now_ns, hold_s=self.hold_s, explorer_url=self.explorer_url)
        out = []
        if old is not None and (alert is None or old["labels"] != alert["labels"]):
            out.append(self._resolution(old, now_ns))
        if alert is not None:
            out.append(alert)
            self.firing[vid] = alert
        else:
            self.firing.pop(vid, None)
        return out

    def certification(self, cert: Certification, now_ns: int) -> list[dict[str, Any]]:
        """A certification of a host: when it passed, every firing alert whose culprit hosts
        have all passed one finished after the verdict was decided resolves (the nodes are back
        in service). A failed one changes nothing."""
        if not cert.passed:
            return []
        self.certified[cert.host] = max(cert.finished_at, self.certified.get(cert.host, 0))
        out = []
        for vid, alert in list(self.firing.items()):
            hosts = [h for h in alert["labels"].get("culprit_host", "").split(",") if h]
            if cert.host not in hosts:
                continue
            decided = parse_utc(alert["annotations"].get("decided_at") or alert["startsAt"])
            if all(self.certified.get(h, 0) > decided for h in hosts):
                out.append(self._resolution(alert, now_ns))
                del self.firing[vid]
        return out

    def refresh(self, now_ns: int) -> list[dict[str, Any]]:
        """Every firing alert with ``endsAt`` moved to ``now_ns + hold_s``."""
        ends = format_utc(now_ns + int(self.hold_s * 1e9))
        for vid, alert in self.firing.items():
            self.firing[vid] = dict(alert, endsAt=ends)
        return list(self.firing.values())
