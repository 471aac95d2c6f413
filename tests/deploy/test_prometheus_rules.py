"""The worker's Prometheus alert rules (``deploy/prometheus/faultstream-rules.yml``) pass their
promtool unit tests (``faultstream-rules.test.yml``, promtool from Debian's prometheus package,
``deploy/prometheus/setup.sh``), and every faultstream metric a rule names is one the worker
exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.setup_fixtures import ensure

pytestmark = pytest.mark.prometheus

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus"


def promtool() -> str:
    ensure("prometheus")
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("deploy/prometheus/setup.sh ran but there is no promtool on PATH", pytrace=False)
    return found


def test_promtool_test_rules() -> None:
    proc = subprocess.run([promtool(), "test", "rules", "faultstream-rules.test.yml"], cwd=RULES,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_promtool_fails_a_rule_that_no_longer_fits_its_test(tmp_path: Path) -> None:
    """The unit tests can fail: a threshold moved from 10000 to 20000 breaks the lag test."""
    (tmp_path / "faultstream-rules.yml").write_text(
        (RULES / "faultstream-rules.yml").read_text().replace("(faultstream_consumer_lag) > 10000",
                                                              "(faultstream_consumer_lag) > 20000"))
    shutil.copy(RULES / "faultstream-rules.test.yml", tmp_path)
    proc = subprocess.run([promtool(), "test", "rules", "faultstream-rules.test.yml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "FaultstreamConsumerLag" in proc.stdout + proc.stderr


def exported_metrics() -> set[str]:
    """The names of every Prometheus metric the code declares (``Counter("faultstream_...")``,
    ``Gauge``, ``Histogram``; a counter's samples carry ``_total``)."""
    names: set[str] = set()
    for path in [*REPO.glob("streams/**/*.py"), *REPO.glob("sinks/**/*.py")]:
        for kind, name in re.findall(r'\b(Counter|Gauge|Histogram)\(\s*"(faultstream_\w+)"', path.read_text()):
            names.add(name if kind != "Counter" or name.endswith("_total") else f"{name}_total")
    return names


def test_rules_name_exported_metrics() -> None:
    exported = exported_metrics()
    assert {"faultstream_consumer_lag", "faultstream_alertmanager_errors_total",
            "faultstream_clickhouse_skipped_total"} <= exported
    groups = yaml.safe_load((RULES / "faultstream-rules.yml").read_text())["groups"]
    rules = [r for g in groups for r in g["rules"]]
    named = {m for r in rules for m in re.findall(r"faultstream_\w+", r["expr"])}
    assert len(named) >= 10
    assert named <= exported, sorted(named - exported)
    # consumer lag, dead letters, sink errors and stalled windows, as the rule file promises
    assert {"FaultstreamConsumerLag", "FaultstreamDeadLetters", "FaultstreamSinkErrors", "FaultstreamStalledWindows",
            "FaultstreamAlertmanagerUnavailable"} <= {r["alert"] for r in rules}
    tested = yaml.safe_load((RULES / "faultstream-rules.test.yml").read_text())["tests"]
    assert {t["alertname"] for case in tested for t in case["alert_rule_test"]} == {r["alert"] for r in rules}
