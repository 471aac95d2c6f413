"""The test suite's own set-up: the project's idempotent scripts, run once per test run by the
fixtures of the tests that need what they install, with their progress on the terminal.

``python3 -m pytest -q`` on a fresh Debian 12 machine (as root) therefore needs nothing run
first. Each script caches what it builds under ``.state/`` (or installs a Debian package once),
so on the next run it takes a second or less. What each one installs or starts is
:data:`SETUPS`; its whole output goes to ``.state/setup/<name>.log`` and, line by line, to the
terminal (``[setup <name>] ...``), whatever ``-q`` or output capture say.

Only the tests that need a service trigger its script (``pytest -m unit`` runs none). A script
that fails makes the test that needed it FAIL with the tail of its log; the next test needing
it fails the same way at once, without running it again.

Daemons: the Kafka broker, the Kubernetes control plane, Prometheus, Alertmanager and Chromium are started by
their fixtures and stopped when the run (or module) ends. The single-node Slurm is started by
``deploy/slurm/setup.sh`` when it is not already answering; :func:`stop_started_daemons` (the
``pytest_sessionfinish`` hook of ``tests/conftest.py``) stops it again with
``deploy/slurm/stop.sh`` -- only when this run started it.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LOGS = REPO / ".state" / "setup"


@dataclass(frozen=True)
class Setup:
    """One set-up script: ``argv`` (run from the repository root), ``what`` it installs or
    builds (shown before it runs), ``timeout_s`` for a cold run."""

    argv: tuple[str, ...]
    what: str
    timeout_s: float = 1800.0


#: name -> the script and what it does (README.md, "Tests", says the same to users)
SETUPS: dict[str, Setup] = {
    "kafka": Setup(("bash", "deploy/kafka/setup.sh"),
                   "Java 17 and Maven (Debian packages, if missing); the Kafka 4 broker's jars (Maven) "
                   "into .state/kafka/libs"),
    "contract": Setup(("bash", "deploy/contract/setup.sh"),
                      "npm ci of the contract checks' and the example consumer's packages into .state/contract"),
    "slurm": Setup(("bash", "deploy/slurm/setup.sh"),
                   "Debian's slurm-wlm, munge and MariaDB (if missing), then starts munged, MariaDB, slurmdbd, "
                   "slurmctld and slurmd on loopback", timeout_s=900.0),
    "prometheus": Setup(("bash", "deploy/prometheus/setup.sh"), "Debian's prometheus package (2.42), if missing"),
    "alertmanager": Setup(("bash", "deploy/alertmanager/setup.sh"),
                          "Debian's prometheus-alertmanager package (0.25), if missing"),
    "kubernetes": Setup(("bash", "deploy/kubernetes/setup.sh"),
                        "etcd (Debian) and kube-apiserver, kube-controller-manager, kubectl and kwok built with Go "
                        "into .state/kubernetes/bin (about 10 minutes cold on 2 cores)"),
    "helm": Setup(("bash", "deploy/helm/setup.sh"), "helm built with Go into .state/kubernetes/bin"),
    "chromium": Setup(("bash", "deploy/ui/setup-chromium.sh"), "Debian's chromium and fonts-liberation, if missing"),
}

_results: dict[str, str | None] = {}  # name -> None (done) or the failure message
_config: pytest.Config | None = None
_started_slurm = False


def configure(config: pytest.Config) -> None:
    """Remember the run's configuration (``pytest_configure``): progress goes to its terminal."""
    global _config
    _config = config


def _say(line: str) -> None:
    """One progress line on the terminal, past pytest's output capture."""
    if _config is None:
        print(line, flush=True)
        return
    capman = _config.pluginmanager.getplugin("capturemanager")
    writer = _config.get_terminal_writer()
    if capman is None:
        writer.line(line)
        return
    with capman.global_and_fixture_disabled():
        writer.line(line)
        writer.flush()


def ensure(name: str) -> None:
    """Run the set-up script ``name`` of :data:`SETUPS` once in this test run (later calls
    return at once), its output shown line by line and kept in ``.state/setup/<name>.log``.
    Fails the calling test (``pytest.fail``, never a skip) with the log's tail when the script
    exits non-zero, cannot run or runs past its time-out."""
    if name in _results:
        if _results[name] is not None:
            pytest.fail(_results[name], pytrace=False)
        return
    setup = SETUPS[name]
    LOGS.mkdir(parents=True, exist_ok=True)
    log_path = LOGS / f"{name}.log"
    _say(f"[setup {name}] {' '.join(setup.argv)}: {setup.what}")
    t0 = time.monotonic()
    rc: int | str
    with log_path.open("w", encoding="utf-8") as log:
        try:
            proc = subprocess.Popen(setup.argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, text=True, errors="replace")
        except OSError as exc:
            rc = f"not started ({exc})"
        else:
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                _say(f"[setup {name}] {line.rstrip()}")
                if time.monotonic() - t0 > setup.timeout_s:
                    proc.kill()
                    break
            try:
                rc = proc.wait(timeout=max(1.0, setup.timeout_s - (time.monotonic() - t0)))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                rc = f"timed out ({setup.timeout_s:.0f} s)"
            if time.monotonic() - t0 > setup.timeout_s:
                rc = f"timed out ({setup.timeout_s:.0f} s)"
    elapsed = time.monotonic() - t0
    if rc == 0:
        _say(f"[setup {name}] done in {elapsed:.1f} s")
        _results[name] = None
        return
    tail = "\n".join(log_path.read_text("utf-8", errors="replace").splitlines()[-40:])
    _results[name] = (f"{' '.join(setup.argv)} failed: exit {rc} after {elapsed:.0f} s; "
                      f"log tail ({log_path}):\n{tail}")
    pytest.fail(_results[name], pytrace=False)


def start_slurm() -> None:
    """Start the single-node Slurm with ``deploy/slurm/setup.sh`` (:func:`ensure`); it is
    stopped again when the run ends (:func:`stop_started_daemons`)."""
    global _started_slurm
    _started_slurm = True
    ensure("slurm")


def stop_started_daemons() -> None:
    """Stop the daemons this run started and that outlive their fixtures: the single-node Slurm
    (``deploy/slurm/stop.sh``), when :func:`start_slurm` started it."""
    global _started_slurm
    if not _started_slurm:
        return
    _started_slurm = False
    proc = subprocess.run(["bash", "deploy/slurm/stop.sh"], cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=False)
    for line in (proc.stdout + proc.stderr).splitlines():
        _say(f"[teardown slurm] {line}")
