"""The worker's alerts agent body (:class:`streams.alerts.AlertsAgent`) without a broker, against
a real Alertmanager 0.25 (``tests/sinks/test_alertmanager.py``'s server): a record is posted then
its cluster's state saved; while Alertmanager is down the agent waits and loses nothing; asked
to stop while it waits, it exits without committing; a record that does not decode, or whose
alerts Alertmanager refuses, is dead-lettered with the reason and changes no state."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from schemas.messages import VerdictInMessage, message_json
from schemas.records import Attribution
from sinks.alertmanager import AlertmanagerClient, AlertmanagerUnavailable, verdict_labels
from streams.alerts import AlertsAgent, AlertSettings
from streams.metrics import Metrics
from tests.sinks.test_alertmanager import Alertmanager, free_port

pytestmark = pytest.mark.prometheus

BUNDLE = Path(__file__).resolve().parents[2] / "examples" / "incidents" / "public-rc15-pcie-aer-xid79-multinode"


@pytest.fixture(scope="module")
def verdict() -> Attribution:
    from streams.replay import replay_bundle

    (att,) = [a for a in replay_bundle(BUNDLE).attributions if a.scope.kind == "workload"]
    return att


class Harness:
    """An AlertsAgent over a dict table, recording dead letters and exits."""

    def __init__(self, url: str) -> None:
        self.settings = AlertSettings(url=url, retry_s=0.2)
        self.table: dict[str, Any] = {}
        self.letters: list[tuple[str, str, bytes | None]] = []
        self.exits: list[str] = []
        self.stop = asyncio.Event()
        self.metrics = Metrics()

        async def dead_letter(source: str, reason: str, original: bytes | None, message: Any) -> None:
            self.letters.append((source, reason, original))

        self.agent = AlertsAgent(self.table, self.settings,
                                 AlertmanagerClient(url, attempts=1, timeout_s=1.0),
                                 dead_letter=dead_letter, metrics=self.metrics, stop=self.stop,
                                 exit_without_commit=self.exits.append)

    def sample(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, labels) or 0.0


def item(cluster: str, value: bytes | None) -> Any:
    return SimpleNamespace(key=cluster.encode(), value=value,
                           message=SimpleNamespace(key=cluster.encode(), topic="w-by-cluster-alerts", partition=0,
                                                   offset=7))


def test_waits_while_alertmanager_is_down_and_loses_nothing(tmp_path: Path, verdict: Attribution) -> None:
    port = free_port()
    h = Harness(f"http://127.0.0.1:{port}")
    servers: list[Alertmanager] = []
    # Alertmanager comes up 1.5 s after the record arrived
    starter = threading.Timer(1.5, lambda: servers.append(Alertmanager(tmp_path / "am", port=port)))
    starter.start()
    try:
        t0 = time.monotonic()
        asyncio.run(h.agent.handle(item("c1", message_json(VerdictInMessage(attribution=verdict)))))
        waited = time.monotonic() - t0
        starter.join()
        [alert] = servers[0].alerts()
    finally:
        for server in servers:
            server.stop()
    assert waited >= 1.5
    assert alert["labels"] == verdict_labels(verdict)
    assert list(h.table["c1"]["firing"]) == [verdict.attribution_id]
    assert h.sample("faultstream_alertmanager_errors_total", kind="unavailable") >= 2
    assert h.sample("faultstream_alerts_posted_total", state="firing") == 1
    assert h.sample("faultstream_agent_inputs_total", agent="alerts", outcome="processed") == 1
    assert h.letters == [] and h.exits == []


def test_asked_to_stop_while_waiting_exits_without_commit(verdict: Attribution) -> None:
    h = Harness(f"http://127.0.0.1:{free_port()}")

    async def run() -> None:
        asyncio.get_running_loop().call_later(0.5, h.stop.set)
        await h.agent.handle(item("c1", message_json(VerdictInMessage(attribution=verdict))))

    with pytest.raises(AlertmanagerUnavailable):
        asyncio.run(run())
    assert len(h.exits) == 1 and h.exits[0].startswith("stopping while 1 alerts wait for Alertmanager")
    assert h.table == {}  # nothing saved: the record is read again at the next start


def test_bad_records_and_refusals_are_dead_lettered(tmp_path: Path, verdict: Attribution) -> None:
    am = Alertmanager(tmp_path / "am")
    try:
        h = Harness(am.url)
        asyncio.run(h.agent.handle(item("c1", b'{"kind": "verdict"')))
        asyncio.run(h.agent.handle(item("c1", b'{"kind": "command"}')))
        # a path Alertmanager does not serve: HTTP 404, a refusal, not retried
        refusing = Harness(am.url + "/not-alertmanager")
        refusing.letters = h.letters
        refusing.agent.dead_letter = h.agent.dead_letter
        original = message_json(VerdictInMessage(attribution=verdict))
        asyncio.run(refusing.agent.handle(item("c1", original)))
        assert am.alerts() == []
    finally:
        am.stop()
    assert [(source, reason.split(":")[0]) for source, reason, _ in h.letters] == [
        ("agent.alerts", "invalid message"), ("agent.alerts", "invalid message"),
        ("agent.alerts", "refused by Alertmanager")]
    assert "HTTP 404" in h.letters[2][1] and h.letters[2][2] == original
    assert h.table == {} and refusing.table == {}
    assert refusing.sample("faultstream_alertmanager_errors_total", kind="refused") == 1
    assert h.sample("faultstream_agent_inputs_total", agent="alerts", outcome="dead_lettered") == 2


def test_settings_refuse_a_url_without_scheme(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import ValidationError

    monkeypatch.setenv("FAULTSTREAM_ALERTS_URL", "alertmanager:9093")
    with pytest.raises(ValidationError, match="expected an http:// or https:// URL"):
        AlertSettings()
    monkeypatch.setenv("FAULTSTREAM_ALERTS_URL", "https://alertmanager.example:9093")
    monkeypatch.setenv("FAULTSTREAM_ALERTS_HEADERS", '{"Authorization": "Bearer t"}')
    monkeypatch.setenv("FAULTSTREAM_ALERTS_PROVISIONAL", "true")
    settings = AlertSettings()
    assert settings.provisional and settings.headers == {"Authorization": "Bearer t"}
    assert settings.book().provisional and settings.book().hold_s == 3600.0
