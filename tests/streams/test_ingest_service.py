"""``streams.app.IngestService``: the batch ingest stage as a child process of the worker. Its
start runs the child, its stop sends SIGTERM and waits (SIGKILL after the timeout), and a child
that exits on its own or is killed is started again with back-off (the worker goes on).

The children here are real processes with small scripts standing in for ``faultstream worker
--stage ingest``; the real stage inside a real worker is exercised by
``tests/streams/test_stream.py``, ``tests/streams/test_ingest_stage.py`` and the scale-out test.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import pytest

import streams.app as app_module
from streams.app import IngestService, ingest_command
from streams.settings import WorkerSettings

#: stops on SIGTERM after writing "stopped" to the file named by its first argument
POLITE = """
import signal, sys, time
path = sys.argv[1]
def stop(*_):
    open(path, "w").write("stopped")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
open(path, "w").write("running")
while True:
    time.sleep(0.1)
"""

#: ignores SIGTERM
STUBBORN = """
import signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(sys.argv[1], "w").write("running")
while True:
    time.sleep(0.1)
"""


def service(script: str, marker: Path, join_timeout_s: float = 5.0) -> IngestService:
    cls = type("Ingest", (IngestService,), {"command": [sys.executable, "-c", script, str(marker)],
                                            "env": None, "join_timeout_s": join_timeout_s, "poll_s": 0.05})
    return cls()


async def wait_for(marker: Path, text: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not (marker.exists() and marker.read_text() == text):
        assert time.monotonic() < deadline, f"{marker} never said {text!r}"
        await asyncio.sleep(0.05)


def test_start_runs_the_child_and_stop_waits_for_its_orderly_end(tmp_path, monkeypatch):
    exits: list[str] = []
    monkeypatch.setattr(app_module, "exit_without_commit", lambda why, code=1: exits.append(why))
    marker = tmp_path / "marker"

    async def lifecycle() -> IngestService:
        svc = service(POLITE, marker)
        await svc.start()
        await wait_for(marker, "running")
        await svc.stop()
        return svc

    svc = asyncio.run(lifecycle())
    assert marker.read_text() == "stopped"
    assert svc.proc.returncode == 0
    assert exits == [], "an orderly stop is not a failure"


#: appends a line to the file named by its first argument, then exits with 3 (a stage that fails)
FAILING = """
import sys
open(sys.argv[1], "a").write("run\\n")
sys.exit(3)
"""


def test_restart_delay_is_a_bounded_back_off():
    assert [app_module.restart_delay(n) for n in range(0, 9)] == [0.0, 0.0, 1.0, 2.0, 5.0, 10.0, 30.0, 30.0, 30.0]
    assert app_module.restart_delay(3, (0.1, 0.2)) == 0.2


@pytest.mark.slow
def test_a_child_that_dies_is_restarted_with_back_off_and_counted(tmp_path, monkeypatch):
    """A child that exits on its own (or is killed) is started again, the worker goes on: the
    first restart at once, the next ones after the back-off; each restart counted."""
    from prometheus_client import CollectorRegistry, Counter

    exits: list[str] = []
    monkeypatch.setattr(app_module, "exit_without_commit", lambda why, code=1: exits.append(why))
    marker = tmp_path / "runs"
    counter = Counter("restarts", "test", registry=CollectorRegistry())

    async def lifecycle() -> tuple[IngestService, list[float]]:
        svc = service(FAILING, marker)
        svc.backoff_s = (0.0, 0.3, 0.6)
        svc.restarts = counter
        started = time.monotonic()
        await svc.start()
        seen: list[float] = []
        deadline = time.monotonic() + 15
        while len(seen) < 4 and time.monotonic() < deadline:
            runs = marker.read_text().count("run") if marker.exists() else 0
            while len(seen) < runs:
                seen.append(time.monotonic() - started)
            await asyncio.sleep(0.02)
        await svc.stop()
        return svc, seen

    svc, seen = asyncio.run(lifecycle())
    assert exits == [], "a dying child no longer ends the worker"
    assert len(seen) >= 4, f"the child ran {len(seen)} times in 15 s, expected 4 (restarts)"
    gaps = [b - a for a, b in zip(seen, seen[1:])]
    # at once, then 0.3 s, then 0.6 s (plus process start-up, ~0.05-0.5 s each)
    assert gaps[1] >= 0.3 and gaps[2] >= 0.6, gaps
    assert gaps[0] < gaps[2], gaps
    assert svc.restarted >= 3 and counter._value.get() == svc.restarted


def test_a_child_killed_by_sigkill_is_replaced_at_once(tmp_path, monkeypatch):
    monkeypatch.setattr(app_module, "exit_without_commit", lambda why, code=1: None)
    marker = tmp_path / "marker"

    async def lifecycle() -> tuple[int, int, int]:
        svc = service(POLITE, marker)
        await svc.start()
        await wait_for(marker, "running")
        first = svc.proc.pid
        marker.unlink()
        os.kill(first, signal.SIGKILL)
        await wait_for(marker, "running")
        second = svc.proc.pid
        await svc.stop()
        return first, second, svc.restarted

    first, second, restarted = asyncio.run(lifecycle())
    assert first != second and restarted == 1
    assert marker.read_text() == "stopped", "the replacement is stopped in order with the worker"


def test_a_child_that_ignores_sigterm_is_killed_after_the_timeout(tmp_path, monkeypatch):
    monkeypatch.setattr(app_module, "exit_without_commit", lambda why, code=1: None)
    marker = tmp_path / "marker"

    async def lifecycle() -> tuple[IngestService, float]:
        svc = service(STUBBORN, marker, join_timeout_s=0.5)
        await svc.start()
        await wait_for(marker, "running")
        started = time.monotonic()
        await svc.stop()
        return svc, time.monotonic() - started

    svc, took = asyncio.run(lifecycle())
    assert svc.proc.returncode == -signal.SIGKILL
    assert 0.5 <= took < 5


def test_an_exit_without_commit_kills_a_hung_child_first(tmp_path, monkeypatch):
    """A worker whose stop passed its deadline ends with ``exit_without_commit``; a child that
    hangs (ignores SIGTERM) must not outlive it."""
    exits: list[int] = []
    monkeypatch.setattr(app_module.os, "_exit", exits.append)
    marker = tmp_path / "marker"

    async def start() -> IngestService:
        svc = service(STUBBORN, marker)
        await svc.start()
        await wait_for(marker, "running")
        return svc

    svc = asyncio.run(start())
    assert svc.proc in app_module.CHILDREN
    app_module.exit_without_commit("shutdown not finished after 30 s")
    assert exits == [1]
    assert svc.proc.wait(10) == -signal.SIGKILL


def test_the_child_gets_the_workers_effective_settings(tmp_path, monkeypatch):
    settings = WorkerSettings(app_id="fs-a", topic_prefix="t-a", allowed_lateness_s=12.5, idle_timeout_s=0.0,
                              fabric_flush_s=0.5, data_dir=tmp_path, web_bind="0.0.0.0", remediation=False,
                              group_instance_id="fs-worker-1", producer_linger_ms=0)
    command, env = ingest_command(settings, metrics_port=6123, batch_size=750, loglevel="warning",
                                  log_format="json")
    assert command[:3] == [sys.executable, "-m", "streams.ingest"]
    assert command[3:] == ["--web-port", "6123", "--batch-size", "750",
                           "--loglevel", "warning", "--log-format", "json", "--parent-pid", str(os.getpid())]
    # the child's metrics are read by the worker only
    assert env["FAULTSTREAM_WEB_BIND"] == "127.0.0.1"
    # the settings the child reads from that environment are the worker's
    for key in [k for k in os.environ if k.startswith("FAULTSTREAM_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        if key.startswith("FAULTSTREAM_"):
            monkeypatch.setenv(key, value)
    seen = WorkerSettings()
    assert seen.model_dump() == settings.model_copy(update={"web_bind": "127.0.0.1"}).model_dump()
