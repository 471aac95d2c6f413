"""The worker-health Grafana dashboard (deploy/grafana/worker_panels.py): its JSON is generated,
every PromQL query names metrics and labels the worker's code defines, parses (``promtool check
rules``) and gives the right values over series named and labelled as the worker exports them
(``promtool test rules``: each query a recording rule, with Grafana's variables replaced by real
values as its Prometheus data source replaces them).

promtool comes with the Debian prometheus package, installed by ``deploy/prometheus/setup.sh``
where missing (:func:`tests.setup_fixtures.ensure`); the tests that run it are marked
``prometheus`` and fail, saying so, when it cannot be installed."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.setup_fixtures import ensure

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "deploy" / "grafana"


def _load_build():
    spec = importlib.util.spec_from_file_location("faultstream_grafana_build", GRAFANA / "build.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


build = _load_build()
wp = build.worker_panels

#: Two workers of one Prometheus job: A holds open windows and decides nothing (stalled), B works.
A, B = "10.0.0.5:6066", "10.0.0.6:6066"
VALUES = {"job": ["faultstream"], "instance": [A, B], "domain": ["gpu_hardware"]}
RATE_INTERVAL = "4m"  # what Grafana picks for a 1 m scrape interval (4 x)


def promtool() -> str:
    """The promtool binary (Debian's prometheus package, installed where missing)."""
    ensure("prometheus")
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("deploy/prometheus/setup.sh succeeded but no promtool is on PATH", pytrace=False)
    return path


def exported_metrics() -> dict[str, tuple[str, set[str]]]:
    """Every Prometheus metric the worker's code defines (``prometheus_client`` Counter, Gauge
    and Histogram calls with a literal name under streams/): name as scraped -> (kind, label
    names). A histogram gives ``_bucket`` (with ``le``), ``_sum`` and ``_count``."""
    out: dict[str, tuple[str, set[str]]] = {}
    for path in (ROOT / "streams").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("Counter", "Gauge", "Histogram") and node.args
                    and isinstance(node.args[0], ast.Constant) and str(node.args[0].value).startswith("faultstream_")):
                continue
            labels_node = node.args[2] if len(node.args) > 2 else next(
                (k.value for k in node.keywords if k.arg == "labelnames"), None)
            labels = {e.value for e in labels_node.elts} if isinstance(labels_node, (ast.List, ast.Tuple)) else set()
            name = node.args[0].value
            if node.func.id == "Histogram":
                out[name + "_bucket"] = ("histogram", labels | {"le"})
                out[name + "_sum"] = out[name + "_count"] = ("histogram", labels)
            else:
                out[name] = (node.func.id.lower(), labels)
    return out


def test_the_committed_worker_dashboard_is_generated() -> None:
    committed = (GRAFANA / "dashboards" / "faultstream-worker.json").read_text(encoding="utf-8")
    assert committed == build.render(build.worker_dashboard()), "run python deploy/grafana/build.py"
    model = json.loads(committed)
    assert [p["title"] for p in model["panels"]] == [p.title for p in wp.PANELS]
    for p, panel in zip(model["panels"], wp.PANELS):
        assert [t["expr"] for t in p["targets"]] == [expr for expr, _ in panel.targets]
        assert {t["datasource"]["uid"] for t in p["targets"]} == {"${prometheus}"}
    names = [v["name"] for v in model["templating"]["list"]]
    assert names == ["prometheus", "job", "instance", "domain"]
    for v in model["templating"]["list"][1:]:
        assert (v["multi"], v["includeAll"], v["allValue"]) == (True, True, ".*")


def test_every_query_names_metrics_and_labels_the_worker_exports() -> None:
    metrics = exported_metrics()
    # the worker's own families, as streams/metrics.py and the stages define them
    assert {"faultstream_consumer_lag", "faultstream_dead_letters_total", "faultstream_clickhouse_skipped_total",
            "faultstream_open_windows", "faultstream_ingest_restarts_total",
            "faultstream_ingest_batch_seconds_bucket"} <= set(metrics)
    target_labels = {"job", "instance"}
    used_metrics = set()
    for panel in wp.PANELS:
        for expr, legend in panel.targets:
            names = set(re.findall(r"\b(faultstream_\w+)\b", expr)) | ({"up"} if re.search(r"\bup\{", expr) else set())
            assert names, f"{panel.key}: no metric in {expr}"
            unknown = {n for n in names if n != "up" and n not in metrics}
            assert not unknown, f"{panel.key}: the worker exports no {unknown}"
            used_metrics |= names
            labels = set(target_labels)
            for n in names - {"up"}:
                labels |= metrics[n][1]
            used = set(re.findall(r"\b(?:by|on)\s*\(([^)]*)\)", expr))
            used = {label.strip() for group in used for label in group.split(",") if label.strip()}
            used |= set(re.findall(r"(\w+)\s*=~?\s*\"", expr))
            used |= set(re.findall(r"\{\{(\w+)\}\}", legend))
            assert used <= labels, f"{panel.key}: labels {used - labels} are on none of {names}"
    # the board covers what an operator watches
    assert {"faultstream_consumer_lag", "faultstream_dead_letters_total", "faultstream_clickhouse_skipped_total",
            "faultstream_open_windows", "faultstream_ingest_restarts_total"} <= used_metrics


def _rules() -> dict:
    return {"groups": [{"name": "faultstream-worker-dashboard", "rules": [
        {"record": f"panel:{p.key}:{chr(ord('A') + k)}", "expr": wp.interpolate(expr, VALUES, RATE_INTERVAL)}
        for p in wp.PANELS for k, (expr, _) in enumerate(p.targets)]}]}


@pytest.mark.prometheus
def test_every_query_parses(tmp_path: Path) -> None:
    rules = tmp_path / "panels.yml"
    rules.write_text(yaml.safe_dump(_rules(), sort_keys=False))
    done = subprocess.run([promtool(), "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    n = sum(len(p.targets) for p in wp.PANELS)
    assert f"SUCCESS: {n} rules found" in done.stdout


def _series(metric: str, labels: dict[str, str], values: str) -> dict[str, str]:
    text = ", ".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{metric}{{{text}}}", "values": values}


@pytest.mark.prometheus
def test_every_query_gives_the_values_of_the_workers_series(tmp_path: Path) -> None:
    job = {"job": "faultstream"}
    a, b = {**job, "instance": A}, {**job, "instance": B}
    other = {"job": "other", "instance": "10.0.0.9:6066"}  # another job: never on this board
    series = [
        _series("faultstream_consumer_lag", {**a, "topic": "faultstream.observations", "partition": "0"}, "100x60"),
        _series("faultstream_consumer_lag", {**b, "topic": "faultstream.observations", "partition": "1"}, "50x60"),
        _series("faultstream_consumer_lag", {**other, "topic": "faultstream.observations", "partition": "0"}, "7x60"),
        _series("faultstream_observations_total", a, "0+600x60"),
        _series("faultstream_observations_processed_total", a, "0+540x60"),
        _series("faultstream_dead_letters_total", {**a, "reason": "undecodable"}, "0+2x60"),
        _series("faultstream_clickhouse_skipped_total", {**b, "model": "Attribution"}, "0+1x60"),
        _series("faultstream_clickhouse_rows_total", {**b, "table": "attributions"}, "0+120x60"),
        _series("faultstream_open_windows", a, "3x60"),
        _series("faultstream_open_windows", b, "2x60"),
        _series("faultstream_verdicts_total", {**a, "domain": "gpu_hardware", "kind": "workload"}, "5x60"),
        _series("faultstream_verdicts_total", {**b, "domain": "gpu_hardware", "kind": "workload"}, "0+1x60"),
        _series("faultstream_verdicts_total", {**b, "domain": "fabric", "kind": "fabric_port"}, "0+1x60"),
        _series("faultstream_ingest_restarts_total", b, "0+1x60"),
        *[_series("faultstream_ingest_batch_seconds_bucket", {**a, "le": le}, f"0+{n}x60")
          for le, n in (("0.1", 3000), ("1.0", 5880), ("2.0", 6000), ("+Inf", 6000))],
        _series("faultstream_agent_inputs_total", {**a, "agent": "ingest", "outcome": "processed"}, "0+60x60"),
        _series("faultstream_offset_gaps_total", {**a, "topic": "faultstream.observations"}, "0x60"),
        _series("faultstream_remediation_executions_total", {**b, "executor": "slurm", "call": "drain", "ok": "false"},
                "0+1x60"),
        _series("faultstream_remediation_executions_total", {**b, "executor": "slurm", "call": "drain", "ok": "true"},
                "0+5x60"),
        _series("up", a, "1x60"),
        _series("up", b, "0x60"),
    ]
    # (recording rule, labels, value) at 60 min: 1 min samples, rates over [4m], counters linear
    want = {
        "consumer_lag:A": [({"topic": "faultstream.observations"}, 150)],
        "throughput:A": [({"instance": A}, 10)],
        "throughput:B": [({"instance": A}, 9)],
        "dead_letters:A": [({"reason": "undecodable"}, 8)],
        "sink_errors:A": [({"model": "Attribution"}, 4)],
        "sink_errors:B": [({"table": "attributions"}, 2)],
        "windows:A": [({"instance": A}, 3), ({"instance": B}, 2)],
        "windows:B": [({"instance": A}, 3)],  # A: windows open, no verdict in 30 minutes
        "ingest_restarts:A": [({"instance": B}, 60)],
        "ingest_batch_seconds:A": [({"instance": A}, 0.1)],
        "ingest_batch_seconds:B": [({"instance": A}, 1.5)],
        "verdicts:A": [({"domain": "gpu_hardware", "kind": "workload"}, 4)],  # the domain variable: no fabric
        "agent_inputs:A": [({"agent": "ingest", "outcome": "processed"}, 1)],
        "agent_inputs:B": [({"topic": "faultstream.observations"}, 0)],
        "executor_failures:A": [({"executor": "slurm"}, 60)],
        "up:A": [({"__name__": "up", **a}, 1), ({"__name__": "up", **b}, 0)],
    }
    assert set(want) == {f"{p.key}:{chr(ord('A') + k)}" for p in wp.PANELS for k in range(len(p.targets))}
    tests = [{"interval": "1m", "input_series": series, "promql_expr_test": [
        {"expr": f"panel:{key}", "eval_time": "60m",
         "exp_samples": [{"labels": "panel:" + key + "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()
                                                                       if k != "__name__") + "}",
                          "value": value} for labels, value in samples]}
        for key, samples in want.items()]}]
    (tmp_path / "panels.yml").write_text(yaml.safe_dump(_rules(), sort_keys=False))
    (tmp_path / "test.yml").write_text(yaml.safe_dump({"rule_files": ["panels.yml"], "evaluation_interval": "1m",
                                                       "tests": tests}, sort_keys=False))
    done = subprocess.run([promtool(), "test", "rules", "test.yml"], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout
