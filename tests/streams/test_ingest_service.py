"""``streams.app.IngestService``: the batch ingest stage as a child process of the worker. Its
start runs the child, its stop sends SIGTERM and waits (SIGKILL after the timeout), and a child
that exits on its own ends the worker without a commit, so both restart together.

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


def test_a_child_that_exits_on_its_own_ends_the_worker_without_a_commit(tmp_path, monkeypatch):
    exits: list[str] = []
    monkeypatch.setattr(app_module, "exit_without_commit", lambda why, code=1: exits.append(why))

    async def lifecycle() -> IngestService:
        svc = service("import sys; sys.exit(3)", tmp_path / "unused")
        await svc.start()
        deadline = time.monotonic() + 10
        while not exits and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await svc.stop()
        return svc

    svc = asyncio.run(lifecycle())
    assert exits == [f"the ingest stage (process {svc.proc.pid}) exited with 3"]


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
    assert command[:3] == [sys.executable, "-m", "streams.cli"]
    assert command[3:] == ["worker", "--stage", "ingest", "--web-port", "6123", "--batch-size", "750",
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
