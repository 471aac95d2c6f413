"""The Grafana dashboard's SQL (deploy/grafana/panels.py) against chDB loaded with real incidents.

Grafana cannot run here, so every panel's query runs as the ClickHouse data source plugin would
send it: the ``$__`` macros expanded as the plugin expands them (deploy/grafana/macros.py, from
the plugin's pkg/macros/macros.go), unqualified table names resolved in the data source's
``defaultDatabase`` (``faultstream``), a fixed time range. A panel whose SQL fails, returns
other columns or other rows than the same figures computed in Python from the same records
fails its test.

What is in the store (one chDB directory for the module, written the way faultstream writes it):

* ``faultstream replay BUNDLE --clickhouse chdb://DIR`` (the CLI, in-process) of seven example
  bundles -- XID 79 on node-a02 (rc15), a stalled rank on node-a02, a Slurm cgroup OOM kill and
  an illegal memory access (XID 31) on node-a01, a Slurm time limit (2025-01-10, another day), a
  flapping port that broke two jobs, a leaf switch down under two jobs; the verdicts it prints (``--json``) are the ones the expectations use;
* every revision the stream publishes for an eighth bundle (a flapping port seen from both
  ends), from the pipeline in live mode (provisional revisions, then final ones), as the
  worker's ClickHouse writer stores them: the time-to-first-verdict panels read revision 1;
* the remediation transitions the worker's remediation agent makes for those verdicts: one
  :class:`streams.remediation.runner.RemediationRunner` per cluster (the worker shards by
  cluster) with the cluster's topology, the workloads' allocations, the packaged policy and a
  deployment breaker of 25 % (c1 has two nodes: rc15's drain of node-a02 trips it), and a
  person's commands: approvals (dry-run executions, a certification returning node-a02), a
  rejection, a cancellation, a breaker reset; expiries from the timer;
* dead letters as the ingest stage and the remediation agent make them (undecodable records,
  a stale certification, a command that no longer fits);
* two slow jobs (``outcome: degraded``, a thermal straggler GPU and a node stalled on NFS, both
  2026-12-01 in c1), replayed through the CLI after the remediation scenario: their goodput
  columns feed the goodput panels.

The dashboard's ``cluster`` and ``domain`` variables are replaced as the plugin and Grafana
replace them (``macros.apply_variables``): "All" unless a test chooses values.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import pytest
import yaml

from connectors.publish import bundle_records
from correlators.remediation import RemediationEngine, load_policy
from correlators.remediation.guards import CircuitBreakerSettings
from schemas.bundle import TopologySpec
from schemas.deadletter import DeadLetter
from schemas.records import (
    Attribution,
    Certification,
    CertificationTest,
    Observation,
    Position,
    RemediationAction,
    RemediationCommand,
    canonical_json,
)
from schemas.utc import parse_utc
from sinks.clickhouse import ClickHouseSink
from sinks.executors import ExecutorSettings
from streams.codec import decode_record
from streams.remediation.inputs import allocation_message
from streams.remediation.runner import RemediationRunner

#: every test here shares a store filled once per module (a few seconds)
pytestmark = [pytest.mark.clickhouse, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "deploy" / "grafana"
EXAMPLES = ROOT / "examples" / "incidents"
NS = 1_000_000_000
DATABASE = "faultstream"

#: Replayed through the CLI.
REPLAYED = (
    "public-rc15-pcie-aer-xid79-multinode",
    "multinode-stalled-rank-11",
    "public-rc66-slurm-cgroup-oom-kill",
    "h200-xid31-illegal-address",
    "public-rc77-slurm-time-limit",
    "fabric-port-flap-two-jobs",
    "fabric-leaf-switch-down-two-jobs",
)
#: Slow jobs (outcome degraded), replayed through the CLI after the remediation scenario.
DEGRADED = ("straggler-gpu-thermal", "straggler-node-nfs-stall")
#: Decided by the pipeline in live mode (every revision stored).
STREAMED = "fabric-port-flap-host-and-switch"

#: The dashboard time range of the tests: every example above lies in it.
RANGE = (datetime(2025, 1, 1, tzinfo=timezone.utc), datetime(2026, 12, 31, 23, 59, 59, tzinfo=timezone.utc))


def _load_build() -> ModuleType:
    """deploy/grafana/build.py loaded by path (deploy/ is not a Python package); it loads
    panels.py and macros.py the same way (:func:`build._load`)."""
    spec = importlib.util.spec_from_file_location("faultstream_grafana_build", GRAFANA / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


build = _load_build()
panels = build.panels
macros = build._load("macros")
PANELS = {p.key: p for p in panels.PANELS}


def t(text: str) -> int:
    """RFC 3339 UTC text -> UTC ns."""
    return parse_utc(text)


def day_of(ns: int) -> datetime:
    """The UTC day (midnight, aware) of a UTC ns time."""
    d = datetime.fromtimestamp(ns // NS, tz=timezone.utc)
    return d.replace(hour=0, minute=0, second=0, microsecond=0)


def as_utc(value: Any) -> Any:
    """A datetime column value as an aware UTC datetime (chDB returns naive UTC or aware)."""
    if isinstance(value, datetime):
        return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)
    return value


def ns_to_dt(ns: int) -> datetime:
    """UTC ns -> aware datetime (microseconds: what a DateTime64(9) column reads back as)."""
    return datetime.fromtimestamp(ns // NS, tz=timezone.utc).replace(microsecond=(ns % NS) // 1000)


# --- the store ----------------------------------------------------------------------------------


class Clock:
    """The runner's wall clock: UTC ns, set by the scenario, one second later on every call."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        self.now += NS
        return self.now


@dataclass
class Store:
    """What the module fixture wrote: the chDB directory, the verdict revisions written (CLI
    replay output and stream publications), every remediation transition record, the dead
    letters, and a client on the store the way Grafana's data source sees it."""

    path: Path
    verdicts: list[Attribution]
    remediations: list[RemediationAction]
    dead_letters: list[DeadLetter]
    client: Any
    log: list[str] = field(default_factory=list)
    tables: set[str] = field(default_factory=set)

    def latest(self) -> list[Attribution]:
        """The latest revision of every verdict (what FINAL returns)."""
        best: dict[str, Attribution] = {}
        for a in self.verdicts:
            if a.attribution_id not in best or a.revision > best[a.attribution_id].revision:
                best[a.attribution_id] = a
        return sorted(best.values(), key=lambda a: a.attribution_id)

    def query(self, key: str, time_from: datetime = RANGE[0], time_to: datetime = RANGE[1],
              **variables: list[str]) -> list[dict[str, Any]]:
        """Run panel ``key`` with the dashboard variables replaced (``variables``: name ->
        values; the others "All") and its macros expanded for ``[time_from, time_to]``; rows as
        dicts (datetimes aware UTC). Asserts the result has the panel's columns, in order."""
        panel = PANELS[key]
        if "attribution_revisions" in panel.sql and "attribution_revisions" not in self.tables:
            pytest.fail(f"{panel.title}: the store has no attribution_revisions table (sinks/ddl.sql): "
                        "every verdict's first revision is read there")
        chosen = {v.name: variables.get(v.name) for v in panels.VARIABLES}
        sql = macros.expand(macros.apply_variables(panel.sql, chosen), time_from, time_to)
        assert "$__" not in sql
        result = self.client.query(sql)
        if result.column_names or result.result_rows:  # chDB names no columns of an empty result
            assert tuple(result.column_names) == panel.columns, f"{panel.title}: columns {result.column_names}"
        return [{c: as_utc(v) for c, v in zip(result.column_names, row)} for row in result.result_rows]


def cli_replay(bundle: Path, url: str) -> list[Attribution]:
    """``faultstream replay BUNDLE --clickhouse URL --json`` in-process; the verdicts it printed."""
    from typer.testing import CliRunner

    from streams.cli import app

    result = CliRunner().invoke(app, ["replay", str(bundle), "--clickhouse", url, "--json"])
    assert result.exit_code == 0, f"faultstream replay {bundle.name} failed ({result.exit_code}): {result.output[-2000:]}"
    return [Attribution.model_validate_json(line) for line in result.stdout.splitlines() if line.strip()]


def stream_revisions(records: list[Observation]) -> list[Attribution]:
    """Every verdict revision the pipeline publishes in live mode for ``records`` (the stream
    worker's output for them, in order: :func:`tests.correlators.test_pipeline.live_run`)."""
    from tests.correlators.test_pipeline import live_run

    _, published = live_run(records)
    return published


def command(kind: str, action: RemediationAction | None, by: str, reason: str, at: int,
            cluster: str | None = None) -> RemediationCommand:
    return RemediationCommand(command=kind, action_id=action.action_id if action else None,
                              cluster=cluster or (action.cluster if action else ""), by=by, reason=reason,
                              at=at).with_id()


def remediation_scenario(verdicts: list[Attribution], observations: list[Observation],
                         stream_observations: list[Observation]) -> tuple[list[RemediationAction], list[DeadLetter], list[str]]:
    """The remediation agent over the verdicts (event-time order, per cluster), with the
    commands, certifications and timer ticks of the module docstring at their times. Returns
    (every transition record in emission order, the dead letters it made, a log)."""
    policy = load_policy()
    # the deployment's breaker: at most a quarter of a cluster out within 5 minutes
    guards = policy.guards.model_copy(update={"circuit_breaker": CircuitBreakerSettings(max_fraction=0.25)})
    topologies: dict[str, TopologySpec] = {}
    allocations: list[Any] = []
    for obs in [*observations, *stream_observations]:
        if obs.kind == "topology":
            topologies[obs.cluster] = TopologySpec.model_validate(obs.attributes.get("topology"))
        message = allocation_message(obs)
        if message is not None:
            allocations.append(message)
    clock = Clock()
    runners: dict[str, RemediationRunner] = {}

    def runner(cluster: str) -> RemediationRunner:
        if cluster not in runners:
            engine = RemediationEngine(policy, topology=topologies.get(cluster), settings=guards)
            runners[cluster] = RemediationRunner(engine, ExecutorSettings(clusters={}), clock=clock)
        return runners[cluster]

    for m in allocations:
        runner(m.cluster).handle_workload(m.cluster, m.workload_id, m.nodes, m.at)

    records: list[RemediationAction] = []
    letters: list[DeadLetter] = []
    log: list[str] = []
    offsets = iter(range(1000))

    def find(cluster: str, action: str, target: str | None = None, state: str = "proposed") -> RemediationAction:
        """The one action of ``cluster`` of that kind on ``target`` in ``state``."""
        held = runner(cluster).engine.actions()
        hits = [a for a in held if a.action == action and target in (None, a.target.host, a.target.port)
                and a.state == state]
        assert len(hits) == 1, f"{cluster}: {action} {target}: {[(a.action, a.target) for a in held]}"
        return runner(cluster).engine.get(hits[0].action_id)

    def apply(cmd: RemediationCommand, at: int) -> None:
        result = runner(cmd.cluster).apply_command(cmd, at=at)
        log.append(f"{cmd.command} {cmd.action_id}: {result.outcome} {result.detail}")
        records.extend(result.records)
        if result.outcome == "rejected":  # as streams/remediation/agent.py dead-letters it
            letters.append(DeadLetter(
                source="agent.remediation", reason=f"command rejected: {result.detail}",
                original=canonical_json(cmd).encode(), original_key=(cmd.action_id or "").encode(),
                position=Position(topic="faultstream.remediation-commands", partition=0, offset=next(offsets)),
                at_ns=at).with_id())

    def run_due(cluster: str, at: int) -> None:
        clock.now = at
        records.extend(runner(cluster).run_due())

    def certify(cluster: str, host: str, finished_at: int, received_at: int) -> None:
        cert = Certification(host=host, cluster=cluster, suite="dcgm-diag-r2", passed=True, finished_at=finished_at,
                             tests=[CertificationTest(name="memory", result="pass"),
                                    CertificationTest(name="pcie", result="pass")]).with_id()
        stale: list[str] = []
        records.extend(runner(cluster).handle_certification(cert, stale))
        for reason in stale:  # as streams/remediation/agent.py dead-letters it
            letters.append(DeadLetter(
                source="agent.remediation", reason=f"certification not applied: {reason}",
                original=canonical_json(cert).encode(), original_key=host.encode(),
                position=Position(topic="faultstream.certifications", partition=0, offset=next(offsets)),
                at_ns=received_at).with_id())
        run_due(cluster, received_at)

    def tick(cluster: str, at: int) -> None:
        clock.now = at
        records.extend(runner(cluster).tick(at))

    steps: list[tuple[int, int, Callable[[], None]]] = []
    for i, att in enumerate(verdicts):
        steps.append((att.decided_at, i, lambda att=att: records.extend(runner(att.scope.cluster).handle_attribution(att))))
    rc77 = next(a for a in verdicts if a.scope.id == "job-1000077")
    c1, flap2, leaf, flap = "c1", "fabric-port-flap-two-jobs", "fabric-leaf-switch-down-two-jobs", STREAMED
    script: list[tuple[int, Callable[[], None]]] = [
        # 2025-01-10: the time-limit notification nobody approved expires
        (rc77.decided_at + 3601 * NS, lambda: tick(c1, rc77.decided_at + 3601 * NS)),
        # c1, 2026-11-30: the XID 31 notification is approved and sent (dry run)
        (t("2026-11-30T01:25:00Z"), lambda: apply(command("approve", find(c1, "notify", "node-a01"), "alice",
                                                            "tell the job's owner", t("2026-11-30T01:25:00Z")),
                                                    t("2026-11-30T01:25:00Z"))),
        (t("2026-11-30T01:25:10Z"), lambda: run_due(c1, t("2026-11-30T01:25:10Z"))),
        # rc15's drain of node-a02 tripped the breaker (1 of 2 nodes > 25 %); a person resets it
        (t("2026-11-30T01:40:00Z"), lambda: apply(command("reset_breaker", None, "ops", "one bad GPU, checked",
                                                            t("2026-11-30T01:40:00Z"), cluster=c1),
                                                    t("2026-11-30T01:40:00Z"))),
        (t("2026-11-30T01:45:00Z"), lambda: [apply(command("approve", find(c1, kind, "node-a02"), "alice",
                                                             "XID 79: off the bus", t("2026-11-30T01:45:00Z")),
                                                     t("2026-11-30T01:45:00Z")) for kind in ("drain", "reboot")]),
        (t("2026-11-30T01:45:30Z"), lambda: run_due(c1, t("2026-11-30T01:45:30Z"))),
        # a certification that finished before the drain began cannot return the node
        (t("2026-11-30T01:50:00Z"), lambda: certify(c1, "node-a02", t("2026-11-30T01:20:00Z"), t("2026-11-30T01:50:00Z"))),
        (t("2026-11-30T02:10:00Z"), lambda: certify(c1, "node-a02", t("2026-11-30T02:10:00Z"), t("2026-11-30T02:10:05Z"))),
        # the OOM kill's notification is rejected; an approval after that no longer fits
        (t("2026-11-30T08:40:00Z"), lambda: apply(command("reject", find(c1, "notify", "node-a01"), "bob",
                                                            "the job's own memory limit", t("2026-11-30T08:40:00Z")),
                                                    t("2026-11-30T08:40:00Z"))),
        (t("2026-11-30T08:45:00Z"), lambda: apply(command("approve", find(c1, "notify", "node-a01", "rejected"), "alice",
                                                            "tell the owner", t("2026-11-30T08:45:00Z")),
                                                    t("2026-11-30T08:45:00Z"))),
        # the flapping port of two jobs is disabled (dry run)
        (t("2026-11-30T02:50:00Z"), lambda: apply(command("approve", find(flap2, "disable_port", "leaf-02/swp1"),
                                                            "alice", "flapping, two jobs hit", t("2026-11-30T02:50:00Z")),
                                                    t("2026-11-30T02:50:00Z"))),
        (t("2026-11-30T02:50:10Z"), lambda: run_due(flap2, t("2026-11-30T02:50:10Z"))),
        # the port seen from both ends: the cable was replaced, the action is cancelled
        (t("2026-11-30T03:10:00Z"), lambda: apply(command("cancel", find(flap, "disable_port", "leaf-01/Ethernet16"),
                                                            "ops", "cable replaced", t("2026-11-30T03:10:00Z")),
                                                    t("2026-11-30T03:10:00Z"))),
        # the leaf switch notifications lapse
        (t("2026-11-30T06:20:00Z"), lambda: tick(leaf, t("2026-11-30T06:20:00Z"))),
    ]
    steps += [(at, len(verdicts) + j, fn) for j, (at, fn) in enumerate(script)]
    for _, _, fn in sorted(steps, key=lambda s: (s[0], s[1])):
        fn()

    # the ingest stage's dead letters: records it cannot decode (streams.codec.decode_record)
    good = next(o for o in stream_observations if o.kind == "log_line")
    raw = canonical_json(good).encode()
    bad_version = json.dumps({**json.loads(raw), "schema_version": 1}).encode()
    for original, at in ((raw[: len(raw) // 2], t("2026-11-30T03:00:00Z")),
                         (bad_version, t("2026-11-30T03:00:05Z")),
                         (b"\xff\xfe not utf-8", t("2025-01-10T15:00:00Z"))):
        reason = decode_record(original, 1 << 20)
        assert isinstance(reason, str), reason
        letters.append(DeadLetter(source="stage.ingest", reason=reason, original=original, original_key=good.host.encode(),
                                  position=Position(topic="faultstream.observations", partition=0, offset=next(offsets)),
                                  at_ns=at).with_id())
    return records, letters, log


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    import clickhouse_connect

    path = tmp_path_factory.mktemp("chdb-grafana")
    url = f"chdb://{path}"
    verdicts: list[Attribution] = []
    for name in REPLAYED:
        verdicts += cli_replay(EXAMPLES / name, url)
    stream_obs, _ = bundle_records(EXAMPLES / STREAMED)
    streamed = stream_revisions(stream_obs)
    assert len({a.revision for a in streamed}) > 1, "the stream gave one revision only"
    sink = ClickHouseSink(url, database=DATABASE)
    try:
        # the topologies and the workloads' allocations the CLI stored with the evidence
        stored = [Observation.model_validate_json(r) for r in sink.observation_records(kinds=["topology", "scheduler_event"])]
        assert {o.cluster for o in stored if o.kind == "topology"} >= {"c1", "fabric-port-flap-two-jobs"}
        remediations, letters, log = remediation_scenario(sorted(verdicts + streamed, key=lambda a: a.decided_at),
                                                          stored, stream_obs)
        for revision in streamed:  # one insert per publication, as a worker flushing often writes them
            sink.write_attributions([revision])
        sink.write_remediations(remediations)
        sink.write_dead_letters(letters)
        degraded = [a for name in DEGRADED for a in cli_replay(EXAMPLES / name, url)]
        assert {a.outcome for a in degraded} == {"degraded"}
        verdicts += degraded
        client = clickhouse_connect.get_client(interface="chdb", path=str(path), database=DATABASE)
        tables = {r[0] for r in client.query("SELECT name FROM system.tables WHERE database = {db:String}",
                                             parameters={"db": DATABASE}).result_rows}
        s = Store(path, verdicts + streamed, remediations, letters, client, log, tables)
        yield s
        client.close()
    finally:
        sink.close()


# --- expectations computed in Python from the same records --------------------------------------


def incidents(store: Store, time_from: datetime = RANGE[0], time_to: datetime = RANGE[1]) -> dict[tuple[str, str], dict[str, Any]]:
    """The incidents in the range as panels.py defines them: (cluster, incident key) ->
    day, domain, GPU-hours, node-hours, jobs, culprit hosts and ports, last verdict time."""
    lo, hi = math.floor(time_from.timestamp()), math.floor(time_to.timestamp())
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for a in store.latest():
        if a.status == "withdrawn" or a.cause_code in ("", "none") or not lo <= a.decided_at / NS <= hi:
            continue
        key = (a.scope.cluster, a.incident_id or a.attribution_id)
        inc = out.setdefault(key, {"first": (a.decided_at, a.attribution_id), "domain": a.domain, "gpu_hours": 0.0,
                                   "node_hours": 0.0, "jobs": 0, "hosts": set(), "ports": set(), "last": a.decided_at})
        if (a.decided_at, a.attribution_id) < inc["first"]:
            inc["first"], inc["domain"] = (a.decided_at, a.attribution_id), a.domain
        if a.scope.kind == "workload":
            inc["jobs"] += 1
            inc["gpu_hours"] += (a.cost.gpu_hours_lost or 0.0) if a.cost else 0.0
            inc["node_hours"] += a.cost.node_hours_lost if a.cost else 0.0
        inc["hosts"].update(a.culprits.hosts)
        inc["ports"].update(a.culprits.ports)
        inc["last"] = max(inc["last"], a.decided_at)
    for inc in out.values():
        inc["day"] = day_of(inc["first"][0])
    return out


def approx_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with floats rounded to 9 decimals (sums in another order differ in the last bits)."""
    return [{k: round(v, 9) if isinstance(v, float) else v for k, v in r.items()} for r in rows]


def inclusive_quantile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (Excel PERCENTILE.INC, ClickHouse
    quantileExactInclusive)."""
    v = sorted(values)
    pos = (len(v) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


# --- the dashboard files ------------------------------------------------------------------------


def test_the_committed_dashboard_is_generated_from_panels_py() -> None:
    committed = (GRAFANA / "dashboards" / "faultstream-fleet.json").read_text(encoding="utf-8")
    assert committed == build.render(), "run python deploy/grafana/build.py"
    model = json.loads(committed)
    assert [p["title"] for p in model["panels"]] == [p.title for p in panels.PANELS]
    for p, panel in zip(model["panels"], panels.PANELS):
        (target,) = p["targets"]
        assert target["rawSql"] == panel.sql
        assert (target["editorType"], target["datasource"]["type"]) == ("sql", "grafana-clickhouse-datasource")
        assert target["format"] == {"timeseries": 0, "table": 1}[panel.format]
        assert p["datasource"]["uid"] == "${datasource}"
    var, *query_vars = model["templating"]["list"]
    assert (var["type"], var["query"], var["current"]["value"]) == ("datasource", "grafana-clickhouse-datasource",
                                                                      "faultstream-clickhouse")
    assert [(v["name"], v["type"], v["query"], v["multi"], v["includeAll"], v["current"]["value"]) for v in query_vars] == [
        (v.name, "query", v.sql, True, True, ["$__all"]) for v in panels.VARIABLES]
    assert [v["datasource"]["uid"] for v in query_vars] == ["${datasource}"] * len(panels.VARIABLES)
    # every panel over verdicts or remediations filters by the cluster variable; verdict panels by domain too
    for panel in panels.PANELS:
        if "dead_letters" not in panel.sql:
            assert "$__conditionalAll(cluster IN (${cluster:singlequote}), $cluster)" in panel.sql, panel.key
        if "attribution" in panel.sql:
            assert "IN (${domain:singlequote}), $domain)" in panel.sql, panel.key


def test_provisioning_points_grafana_at_faultstreams_clickhouse_and_dashboards() -> None:
    ds = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "faultstream-clickhouse.yaml").read_text())
    (source,) = ds["datasources"]
    assert (ds["apiVersion"], source["type"], source["uid"]) == (1, "grafana-clickhouse-datasource", "faultstream-clickhouse")
    j = source["jsonData"]
    assert (j["host"], j["port"], j["protocol"], j["username"], j["defaultDatabase"]) == (
        "$FAULTSTREAM_CLICKHOUSE_HOST", "$FAULTSTREAM_CLICKHOUSE_PORT", "http", "$FAULTSTREAM_CLICKHOUSE_USER",
        "$FAULTSTREAM_CLICKHOUSE_DATABASE")
    assert source["secureJsonData"] == {"password": "$FAULTSTREAM_CLICKHOUSE_PASSWORD"}
    dp = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "faultstream.yaml").read_text())
    (provider,) = dp["providers"]
    assert (provider["type"], provider["options"]["path"]) == ("file", "/var/lib/grafana/dashboards/faultstream")
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    grafana = compose["services"]["grafana"]
    assert "./deploy/grafana/provisioning/datasources:/etc/grafana/provisioning/datasources:ro" in grafana["volumes"]
    assert "./deploy/grafana/provisioning/dashboards:/etc/grafana/provisioning/dashboards:ro" in grafana["volumes"]
    assert "./deploy/grafana/dashboards:/var/lib/grafana/dashboards/faultstream:ro" in grafana["volumes"]
    env = grafana["environment"]
    assert env["FAULTSTREAM_CLICKHOUSE_HOST"] == "clickhouse" and env["FAULTSTREAM_CLICKHOUSE_PORT"] == "8123"
    assert env["FAULTSTREAM_CLICKHOUSE_PASSWORD"] == compose["services"]["clickhouse"]["environment"]["CLICKHOUSE_PASSWORD"]
    assert "grafana-clickhouse-datasource" in env["GF_INSTALL_PLUGINS"]


def test_macros_expand_as_the_plugin_documents() -> None:
    # the plugin's own examples (pkg/macros/macros_test.go, docs/sources/query-editor.md)
    lo = datetime(2014, 11, 12, 11, 45, 26, 371000, tzinfo=timezone.utc)
    hi = datetime(2015, 11, 12, 11, 45, 26, 371000, tzinfo=timezone.utc)
    cases = {
        "$__timeFilter(time)": "time >= toDateTime(1415792726) AND time <= toDateTime(1447328726)",
        "$__timeFilter_ms(time)": "time >= fromUnixTimestamp64Milli(1415792726371) AND "
                                  "time <= fromUnixTimestamp64Milli(1447328726371)",
        "$__dateFilter(date)": "date >= toDate('2014-11-12') AND date <= toDate('2015-11-12')",
        "$__dateTimeFilter(d, t)": "(d >= toDate('2014-11-12') AND d <= toDate('2015-11-12')) AND "
                                   "(t >= toDateTime(1415792726) AND t <= toDateTime(1447328726))",
        "$__fromTime": "toDateTime(1415792726)",
        "$__toTime_ms": "fromUnixTimestamp64Milli(1447328726371)",
        "$__timeInterval(at)": "toStartOfInterval(toDateTime(at), INTERVAL 20 second)",
        "$__interval_s": "20",
        "x = '$__fromTime' -- $__toTime": "x = '$__fromTime' -- $__toTime",  # strings and comments stay
        "$__timeFilter(toDate(a, 'UTC'))": "toDate(a, 'UTC') >= toDateTime(1415792726) AND "
                                           "toDate(a, 'UTC') <= toDateTime(1447328726)",
    }
    for sql, want in cases.items():
        assert macros.expand(sql, lo, hi, interval_s=20) == want, sql
    with pytest.raises(macros.MacroError, match="unknown macro"):
        macros.expand("$__nope(x)", lo, hi)
    with pytest.raises(macros.MacroError, match="expected 1 argument"):
        macros.expand("$__timeFilter(a, b)", lo, hi)


def test_variables_are_replaced_as_the_plugin_and_grafana_replace_them() -> None:
    sql = "WHERE $__conditionalAll(c IN (${cluster:singlequote}), $cluster) AND $__conditionalAll(d = $domain, $domain)"
    assert macros.apply_variables(sql, {"cluster": None, "domain": None}) == "WHERE 1=1 AND 1=1"
    assert macros.apply_variables(sql, {"cluster": ["c1", "o'k"], "domain": ["fabric"]}) == (
        "WHERE c IN ('c1','o\\'k') AND d = fabric")
    assert macros.apply_variables("x IN ($cluster)", {"cluster": ["a", "b"]}) == "x IN ('a','b')"
    assert macros.apply_variables(sql, {"cluster": [], "domain": ["x"]}) == "WHERE 1=1 AND d = x"
    with pytest.raises(macros.MacroError, match="unknown variable"):
        macros.apply_variables("$nope", {})
    with pytest.raises(macros.MacroError, match="All"):
        macros.apply_variables("x = $cluster", {"cluster": None})


# --- every panel against the store --------------------------------------------------------------


@pytest.mark.parametrize("key", [p.key for p in panels.PANELS])
def test_every_panel_runs_and_returns_rows(store: Store, key: str) -> None:
    rows = store.query(key)
    assert rows, f"{PANELS[key].title}: no rows over {RANGE}"
    if PANELS[key].format == "timeseries":
        times = [r["time"] for r in rows]
        assert times == sorted(times), "a time series must come in time order"


def test_the_variables_offer_the_stores_clusters_and_domains(store: Store) -> None:
    got = {v.name: [r[0] for r in store.client.query(v.sql).result_rows] for v in panels.VARIABLES}
    latest = store.latest()
    assert got["cluster"] == sorted({a.scope.cluster for a in latest})
    assert got["domain"] == sorted({a.domain for a in latest if a.domain not in ("", "none")})
    assert {"c1", "fabric-port-flap-two-jobs"} <= set(got["cluster"]) and "storage" in got["domain"]


def _rounded(rows: list[dict]) -> list[dict]:
    """``rows`` with every float to 9 decimals: ClickHouse sums floats in parallel, so the last
    bits of a sum depend on how its threads split the rows (0.2336 vs 0.23359999999999997)."""
    return [{k: round(v, 9) if isinstance(v, float) else v for k, v in r.items()} for r in rows]


@pytest.mark.parametrize("key", [p.key for p in panels.PANELS])
def test_every_panel_runs_with_a_cluster_and_domains_chosen(store: Store, key: str) -> None:
    columns = PANELS[key].columns
    chosen = store.query(key, cluster=["c1"], domain=["gpu_hardware", "storage"])
    if "cluster" in columns:
        assert {r["cluster"] for r in chosen} <= {"c1"}
    if "domain" in columns:
        assert chosen and {r["domain"] for r in chosen} <= {"gpu_hardware", "storage"}
    if "cluster" in columns:  # a cluster chosen: the rows of that cluster, nothing else changed
        everything = store.query(key)
        for cluster in sorted({r["cluster"] for r in everything}):
            assert _rounded(store.query(key, cluster=[cluster])) == _rounded(
                [r for r in everything if r["cluster"] == cluster])
    none = store.query(key, cluster=["no-such-cluster"])
    assert (none == []) == ("dead_letters" not in PANELS[key].sql), f"{PANELS[key].title}: {none}"


def test_the_cluster_and_domain_choices_filter_incidents(store: Store) -> None:
    want: dict[tuple[datetime, str], int] = defaultdict(int)
    for (cluster, _), inc in incidents(store).items():
        if cluster == "c1" and inc["domain"] in ("gpu_hardware", "storage"):
            want[(inc["day"], inc["domain"])] += 1
    rows = store.query("incidents_per_domain", cluster=["c1"], domain=["gpu_hardware", "storage"])
    assert [(r["time"], r["domain"], r["incidents"]) for r in rows] == [(d, dom, n) for (d, dom), n in sorted(want.items())]
    assert (datetime(2026, 12, 1, tzinfo=timezone.utc), "storage", 1) in [(r["time"], r["domain"], r["incidents"])
                                                                          for r in rows]


def test_gpu_hours_lost_per_cluster_per_day(store: Store) -> None:
    want: dict[tuple[datetime, str], float] = defaultdict(float)
    for (cluster, _), inc in incidents(store).items():
        want[(inc["day"], cluster)] += inc["gpu_hours"]
    rows = store.query("gpu_hours_per_cluster")
    assert approx_rows(rows) == approx_rows([{"time": d, "cluster": c, "gpu_hours_lost": h}
                                             for (d, c), h in sorted(want.items())])


def degraded_verdicts(store: Store) -> list[Attribution]:
    return [a for a in store.latest() if a.outcome == "degraded" and a.scope.kind == "workload"
            and a.status != "withdrawn"]


def test_goodput_lost_by_slow_jobs_per_cluster(store: Store) -> None:
    slow = degraded_verdicts(store)
    assert len(slow) == 2 and all(a.cost.gpu_hours_lost_per_hour for a in slow)
    want: dict[tuple[datetime, str], float] = defaultdict(float)
    for a in slow:
        want[(day_of(a.decided_at), a.scope.cluster)] += a.cost.gpu_hours_lost_per_hour
    rows = store.query("degraded_goodput_per_cluster")
    assert approx_rows(rows) == approx_rows([{"time": d, "cluster": c, "gpu_hours_per_hour_lost": v}
                                             for (d, c), v in sorted(want.items())])
    # one domain chosen: the storage straggler's alone
    (nfs,) = [a for a in slow if a.domain == "storage"]
    assert [r["gpu_hours_per_hour_lost"] for r in store.query("degraded_goodput_per_cluster", domain=["storage"])] == [
        pytest.approx(nfs.cost.gpu_hours_lost_per_hour)]


def test_slow_jobs_table_names_cause_culprits_and_goodput(store: Store) -> None:
    slow = sorted(degraded_verdicts(store), key=lambda a: (-a.cost.gpu_hours_lost_per_hour, a.decided_at, a.attribution_id))
    rows = store.query("degraded_jobs")
    assert [(r["job"], r["cause"], r["hosts"], r["goodput_lost_fraction"], r["gpu_hours_lost_per_hour"],
             r["gpu_hours_lost"], r["slow_since"], r["decided_at"]) for r in rows] == [
        (a.scope.id, a.cause_code, ", ".join(a.culprits.hosts), a.cost.goodput_lost_fraction,
         a.cost.gpu_hours_lost_per_hour, a.cost.gpu_hours_lost, ns_to_dt(a.cost.lost_from), ns_to_dt(a.decided_at))
        for a in slow]
    assert {r["cause"] for r in rows} == {"straggler.gpu_thermal", "straggler.storage"}


def test_incidents_per_domain_per_day_count_each_incident_once(store: Store) -> None:
    want: dict[tuple[datetime, str], int] = defaultdict(int)
    for inc in incidents(store).values():
        want[(inc["day"], inc["domain"])] += 1
    rows = store.query("incidents_per_domain")
    assert [(r["time"], r["domain"], r["incidents"]) for r in rows] == [(d, dom, n) for (d, dom), n in sorted(want.items())]
    by = {(r["time"], r["domain"]): r["incidents"] for r in rows}
    # the two fabric faults are one incident each, whatever their four verdicts; rc77 is a day of its own
    assert by[(datetime(2026, 11, 30, tzinfo=timezone.utc), "fabric")] == 3
    assert by[(datetime(2025, 1, 10, tzinfo=timezone.utc), "scheduler")] == 1
    assert by[(datetime(2026, 11, 30, tzinfo=timezone.utc), "gpu_hardware")] == 1


def test_gpu_hours_lost_per_domain_sum_the_workload_verdicts_costs(store: Store) -> None:
    want: dict[tuple[datetime, str], float] = defaultdict(float)
    for inc in incidents(store).values():
        want[(inc["day"], inc["domain"])] += inc["gpu_hours"]
    rows = store.query("gpu_hours_per_domain")
    assert approx_rows(rows) == approx_rows([{"time": d, "domain": dom, "gpu_hours_lost": h}
                                             for (d, dom), h in sorted(want.items())])
    # straight from the replay's verdicts: rc15's 2.6954 GPU-hours are the GPU hardware day's
    (rc15,) = [a for a in store.verdicts if a.scope.id == "job-1006"]
    nov30 = datetime(2026, 11, 30, tzinfo=timezone.utc)
    assert {(r["time"], r["domain"]): r["gpu_hours_lost"] for r in rows}[(nov30, "gpu_hardware")] == pytest.approx(
        rc15.cost.gpu_hours_lost)
    # the fabric day: the workload verdicts' hours once, not again through their fabric and incident verdicts
    fabric = sum(a.cost.gpu_hours_lost for a in store.latest()
                 if a.domain == "fabric" and a.scope.kind == "workload" and a.cost is not None)
    assert {(r["time"], r["domain"]): r["gpu_hours_lost"] for r in rows}[(nov30, "fabric")] == pytest.approx(fabric)


def test_goodput_by_domain(store: Store) -> None:
    want: dict[str, dict[str, Any]] = {}
    for inc in incidents(store).values():
        w = want.setdefault(inc["domain"], {"domain": inc["domain"], "incidents": 0, "jobs_hit": 0,
                                            "gpu_hours_lost": 0.0, "node_hours_lost": 0.0})
        w["incidents"] += 1
        w["jobs_hit"] += inc["jobs"]
        w["gpu_hours_lost"] += inc["gpu_hours"]
        w["node_hours_lost"] += inc["node_hours"]
    expected = sorted(want.values(), key=lambda w: (-round(w["gpu_hours_lost"], 9), -w["incidents"], w["domain"]))
    assert approx_rows(store.query("goodput_by_domain")) == approx_rows(expected)


def culprit_rows(store: Store, what: str) -> list[dict[str, Any]]:
    acc: dict[tuple[str, str], dict[str, Any]] = {}
    for (cluster, _), inc in incidents(store).items():
        for name in inc[what]:
            r = acc.setdefault((cluster, name), {"cluster": cluster, what[:-1]: name, "incidents": 0,
                                                 "gpu_hours_lost": 0.0, "jobs_hit": 0, "last_verdict_at": 0})
            r["incidents"] += 1
            r["gpu_hours_lost"] += inc["gpu_hours"]
            r["jobs_hit"] += inc["jobs"]
            r["last_verdict_at"] = max(r["last_verdict_at"], inc["last"])
    rows = sorted(acc.values(), key=lambda r: (-round(r["gpu_hours_lost"], 9), -r["incidents"], r["cluster"], r[what[:-1]]))
    for r in rows:
        r["last_verdict_at"] = ns_to_dt(r["last_verdict_at"])
        if what == "hosts":
            del r["jobs_hit"]
    return rows[:20]


def test_top_culprit_nodes(store: Store) -> None:
    rows = store.query("top_culprit_hosts")
    assert approx_rows(rows) == approx_rows(culprit_rows(store, "hosts"))
    # node-a02 of c1: rc15's XID 79, the stalled rank and the thermal straggler, the most GPU-hours of any node
    assert (rows[0]["cluster"], rows[0]["host"], rows[0]["incidents"]) == ("c1", "node-a02", 3)
    (rc15,) = [a for a in store.verdicts if a.scope.id == "job-1006"]
    (stalled,) = [a for a in store.verdicts if a.scope.id == "job-1010"]
    (thermal,) = [a for a in store.verdicts if a.cause_code == "straggler.gpu_thermal"]
    assert rows[0]["gpu_hours_lost"] == pytest.approx(rc15.cost.gpu_hours_lost + stalled.cost.gpu_hours_lost
                                                      + thermal.cost.gpu_hours_lost)
    node_a01 = next(r for r in rows if (r["cluster"], r["host"]) == ("c1", "node-a01"))
    assert node_a01["incidents"] == 4  # the OOM kill, the illegal address, the time limit and the NFS stall


def test_top_culprit_ports(store: Store) -> None:
    rows = store.query("top_culprit_ports")
    assert approx_rows(rows) == approx_rows(culprit_rows(store, "ports"))
    top = rows[0]
    # the flapping port that broke two jobs: both ends of its cable, one incident, two jobs
    assert (top["cluster"], top["port"], top["incidents"], top["jobs_hit"]) == (
        "fabric-port-flap-two-jobs", "leaf-02/swp1", 1, 2)
    ends = {r["port"] for r in rows if r["cluster"] == "fabric-port-flap-two-jobs"}
    assert ends == {"leaf-02/swp1", "node-a05/mlx5_0/1"}


def first_revisions(store: Store) -> dict[str, Attribution]:
    first: dict[str, Attribution] = {}
    for a in store.verdicts:
        if a.attribution_id not in first or a.revision < first[a.attribution_id].revision:
            first[a.attribution_id] = a
    return first


def test_time_to_first_verdict_reads_revision_one(store: Store) -> None:
    by_kind: dict[str, list[float]] = defaultdict(list)
    for a in first_revisions(store).values():
        if a.cost is not None:
            by_kind[a.scope.kind].append(a.cost.verdict_after_s)
    want = [{"scope_kind": k, "verdicts": len(v), "p50_s": inclusive_quantile(v, 0.5),
             "p90_s": inclusive_quantile(v, 0.9), "max_s": max(v)} for k, v in sorted(by_kind.items())]
    rows = store.query("time_to_verdict")
    assert approx_rows(rows) == approx_rows(want)
    # the streamed port verdict was first decided 90.9 s after the cause; its final revision says 128.5 s
    streamed = [a for a in store.verdicts if a.scope.kind == "fabric_port" and a.scope.cluster == STREAMED]
    first, last = min(streamed, key=lambda a: a.revision), max(streamed, key=lambda a: a.revision)
    assert first.cost.verdict_after_s < last.cost.verdict_after_s
    assert first.cost.verdict_after_s in by_kind["fabric_port"]
    assert last.cost.verdict_after_s not in by_kind["fabric_port"]


def test_time_to_first_verdict_buckets(store: Store) -> None:
    values = [a.cost.verdict_after_s for a in first_revisions(store).values()
              if a.scope.kind == "workload" and a.cost is not None]
    want = [{"bucket": label, "verdicts": sum(lo <= v < hi for v in values)}
            for label, lo, hi in panels.TIME_TO_VERDICT_BUCKETS]
    rows = store.query("time_to_verdict_buckets")
    assert rows == want
    assert sum(r["verdicts"] for r in rows) == len(values) == 12  # the nine bundles' and the streamed one's workloads


def latest_actions(store: Store) -> dict[str, RemediationAction]:
    best: dict[str, RemediationAction] = {}
    for r in store.remediations:
        if r.action_id not in best or r.sequence > best[r.action_id].sequence:
            best[r.action_id] = r
    return best


def test_remediation_outcomes_per_day(store: Store) -> None:
    want: dict[tuple[datetime, str], int] = defaultdict(int)
    for a in latest_actions(store).values():
        if a.state in panels.TERMINAL_STATES:
            want[(day_of(a.updated_at), a.state)] += 1
    rows = store.query("remediation_outcomes")
    assert [(r["time"], r["state"], r["actions"]) for r in rows] == [(d, s, n) for (d, s), n in sorted(want.items())]
    nov30 = datetime(2026, 11, 30, tzinfo=timezone.utc)
    got = {(r["time"], r["state"]): r["actions"] for r in rows}
    # sent notification, reboot, drain (after its certification), disabled port
    assert got[(nov30, "done")] == 4
    # the OOM kill's notification, the cancelled port, the leaf switch's notification
    assert (got[(nov30, "rejected")], got[(nov30, "cancelled")], got[(nov30, "expired")]) == (1, 1, 1)
    assert got[(datetime(2025, 1, 10, tzinfo=timezone.utc), "expired")] == 1


def test_open_remediation_actions(store: Store) -> None:
    open_ = sorted((a for a in latest_actions(store).values() if a.state in panels.OPEN_STATES),
                   key=lambda a: (-a.severity, a.created_at, a.action_id))
    rows = store.query("open_actions")
    assert [(r["cluster"], r["action"], r["state"], r["created_at"]) for r in rows] == [
        (a.cluster, a.action, a.state, ns_to_dt(a.created_at)) for a in open_]
    # the stalled rank's recertification of its suspects still waits for a person
    assert ("c1", "recertify", "proposed") in {(r["cluster"], r["action"], r["state"]) for r in rows}


def breaker_rows(store: Store, until_ns: int) -> list[dict[str, Any]]:
    """The circuit breaker panel computed from the transition records: per action, the
    transitions whose circuit_breaker result differs from the previous one (evaluations); per
    cluster, the latest evaluation (updated_at, sequence, action id) named as panels.py names it."""
    transitions = {(r.action_id, r.sequence): r for r in store.remediations if r.updated_at <= until_ns}
    latest: dict[str, tuple[tuple[int, int, str], Any]] = {}
    previous: dict[str, tuple[bool, str]] = {}
    for (aid, _), r in sorted(transitions.items()):
        guard = next((g for g in r.guards if g.guard == "circuit_breaker"), None)
        if guard is None:
            continue
        result = (guard.passed, guard.detail)
        if previous.get(aid) == result:
            continue
        previous[aid] = result
        key = (r.updated_at, r.sequence, aid)
        if r.cluster not in latest or key > latest[r.cluster][0]:
            latest[r.cluster] = (key, guard)
    out = []
    for cluster, ((at, _, _), g) in sorted(latest.items()):
        state = ("tripped" if g.detail.startswith("tripped") else "reset"
                 if g.detail.startswith("blocked while the breaker was tripped") else "closed" if g.passed else "fail_closed")
        out.append({"cluster": cluster, "state": state, "checked_at": ns_to_dt(at), "detail": g.detail})
    return out


def test_circuit_breaker_state_per_cluster(store: Store) -> None:
    before_reset = datetime(2026, 11, 30, 1, 35, tzinfo=timezone.utc)
    during = store.query("circuit_breaker", RANGE[0], before_reset)
    assert during == breaker_rows(store, int(before_reset.timestamp()) * NS)
    # rc15's drain of node-a02 tripped c1's breaker: 1 of its 2 nodes is more than 25 %
    assert [(r["cluster"], r["state"], r["checked_at"]) for r in during] == [
        ("c1", "tripped", ns_to_dt(t("2026-11-30T01:31:10Z")))]
    assert during[0]["detail"] == "tripped now: 1 of 2 nodes taken out within 300 s (limit 25%)"
    rows = store.query("circuit_breaker")
    assert rows == breaker_rows(store, int(RANGE[1].timestamp()) * NS)
    assert [(r["cluster"], r["state"]) for r in rows] == [
        ("c1", "reset"), ("fabric-port-flap-host-and-switch", "closed"), ("fabric-port-flap-two-jobs", "closed")]
    c1 = rows[0]
    assert c1["checked_at"] == ns_to_dt(t("2026-11-30T01:40:00Z")) and "reset by ops" in c1["detail"]
    # the streamed port: the provisional revision's "not counted" result was superseded by the final one's
    assert rows[1]["detail"] == rows[2]["detail"] == "1 of 8 nodes taken out within 300 s (limit 25%)"
    assert rows[1]["checked_at"] == ns_to_dt(t("2026-11-30T03:03:19Z"))


def test_dead_letters_per_source_per_day(store: Store) -> None:
    want: dict[tuple[datetime, str], int] = defaultdict(int)
    for d in store.dead_letters:
        want[(day_of(d.at_ns), d.source)] += 1
    rows = store.query("dead_letters_per_source")
    assert [(r["time"], r["source"], r["dead_letters"]) for r in rows] == [(d, s, n) for (d, s), n in sorted(want.items())]
    nov30 = datetime(2026, 11, 30, tzinfo=timezone.utc)
    got = {(r["time"], r["source"]): r["dead_letters"] for r in rows}
    assert (got[(nov30, "agent.remediation")], got[(nov30, "stage.ingest")]) == (2, 2)


def test_dead_letter_reasons(store: Store) -> None:
    rows = store.query("dead_letter_reasons")
    kinds = {(r["source"], r["kind"]): r["dead_letters"] for r in rows}
    assert kinds == {("agent.remediation", "command rejected"): 1, ("agent.remediation", "certification not applied"): 1,
                     ("stage.ingest", "invalid json"): 2, ("stage.ingest", "schema version"): 1}
    (stale,) = [r for r in rows if r["kind"] == "certification not applied"]
    assert "cannot return the node" in stale["last_reason"]


def test_the_time_range_filters(store: Store) -> None:
    only_2025 = (datetime(2025, 1, 1, tzinfo=timezone.utc), datetime(2025, 12, 31, tzinfo=timezone.utc))
    assert [(r["domain"], r["incidents"]) for r in store.query("incidents_per_domain", *only_2025)] == [("scheduler", 1)]
    assert [r["host"] for r in store.query("top_culprit_hosts", *only_2025)] == ["node-a01"]
    assert [(r["source"], r["dead_letters"]) for r in store.query("dead_letters_per_source", *only_2025)] == [
        ("stage.ingest", 1)]
    assert [(r["state"], r["actions"]) for r in store.query("remediation_outcomes", *only_2025)] == [("expired", 1)]


def test_query_of_a_store_that_is_not_there_is_one_line_and_creates_nothing(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "no-store"
    assert build.main(["--query", f"chdb://{missing}"]) == 2
    assert capsys.readouterr().err == f"error: no chDB store at {missing} (replay a bundle into it first)\n"
    assert not missing.exists()
