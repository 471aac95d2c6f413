"""Remediation records and certifications in ClickHouse (the real engine: chDB through
clickhouse-connect), as the worker's ``store_remediations`` / ``store_certifications`` agents
write them.

The records are the real output of the remediation runner (engine + dry-run executor) for the
real example bundle's verdict (``public-rc15-pcie-aer-xid79-multinode``: XID 79 on node-a02):
drain and reboot proposed, approved by alice, executed in dry run, the drain released by a
passing certification. One chDB directory for the module, one database per test (see
``tests/sinks/test_clickhouse_sink.py`` for why).
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from correlators.remediation import RemediationEngine, load_policy
from schemas.records import Certification, CertificationTest, RemediationAction, RemediationCommand
from sinks.clickhouse import ClickHouseSink
from sinks.executors import ExecutorSettings
from streams.remediation.runner import RemediationRunner
from schemas.utc import format_utc

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "examples" / "incidents" / "public-rc15-pcie-aer-xid79-multinode"
NS = 1_000_000_000

_db = itertools.count()


@pytest.fixture(scope="module")
def chdb_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("chdb-remediation")


@pytest.fixture
def sink(chdb_dir: Path):
    s = ClickHouseSink(f"chdb://{chdb_dir}", database=f"r{next(_db)}")
    yield s
    s.close()


@pytest.fixture(scope="module")
def lifecycle() -> tuple[list[RemediationAction], Certification]:
    """Every transition record of the bundle's remediation, in emission order, and the passing
    certification that released the drain."""
    from streams.replay import replay_bundle

    (att,) = [a for a in replay_bundle(BUNDLE).attributions if a.scope.kind == "workload"]
    clock = itertools.count(att.decided_at + 60 * NS, NS)
    runner = RemediationRunner(RemediationEngine(load_policy(), fleet_size=64, fleet_nodes=["node-a01", "node-a02"]), ExecutorSettings(clusters={}),
                               clock=lambda: next(clock))
    records = runner.handle_attribution(att)
    drain, reboot = (next(r for r in records if r.action == k) for k in ("drain", "reboot"))
    at = att.decided_at + 120 * NS
    for action in (drain, reboot):
        records += runner.handle_command(RemediationCommand(
            command="approve", action_id=action.action_id, cluster="c1", by="alice", reason="checked", at=at))
    records += runner.run_due()
    cert = Certification(host="node-a02", cluster="c1", suite="dcgm-diag-r2", passed=True, finished_at=next(clock),
                         tests=[CertificationTest(name="memory", result="pass"),
                                CertificationTest(name="pcie", result="pass")]).with_id()
    records += runner.handle_certification(cert)
    records += runner.run_due()
    return records, cert


def test_the_lifecycle_is_what_the_runner_says(lifecycle) -> None:
    records, _ = lifecycle
    states = {}
    for r in records:
        states.setdefault(r.action, []).append((r.sequence, r.state))
    assert states["drain"] == [(1, "proposed"), (2, "approved"), (3, "executing"), (4, "executing"), (5, "done")]
    assert states["reboot"] == [(1, "proposed"), (2, "approved"), (3, "executing"), (4, "done")]


def test_latest_sequence_wins_in_any_write_order_and_every_transition_is_kept(sink: ClickHouseSink, lifecycle) -> None:
    records, _ = lifecycle
    shuffled = records[:]
    random.Random(5).shuffle(shuffled)
    for r in shuffled:  # one insert per record, in a shuffled order (out-of-order delivery)
        sink.write_remediations([r])
    sink.write_remediations(records)  # and the whole batch again (a replay after a crash)
    assert sink.count("remediations", final=True) == 2
    assert sink.count("remediation_transitions", final=True) == len(records) == 9
    latest = {r.action: r for r in sink.fetch("remediations")}
    assert {k: (v.state, v.sequence) for k, v in latest.items()} == {"drain": ("done", 5), "reboot": ("done", 4)}
    assert latest["drain"] == max((r for r in records if r.action == "drain"), key=lambda r: r.sequence)
    history = sink.fetch("remediation_transitions", [latest["drain"].action_id])
    assert [(r.sequence, r.state) for r in history] == [
        (1, "proposed"), (2, "approved"), (3, "executing"), (4, "executing"), (5, "done")]


def test_typed_columns_carry_the_decision_executor_and_result(sink: ClickHouseSink, lifecycle) -> None:
    records, cert = lifecycle
    sink.write_remediations(records)
    rows = sink.client.query(
        f"SELECT action, sequence, state, cluster, incident_id, target_host, decision_by, decision_reason, "
        f"toUnixTimestamp64Nano(decision_at), executor, result, mode, policy_id, guards_failed "
        f"FROM {sink.database}.remediations FINAL ORDER BY action"
    ).result_rows
    drain = max((r for r in records if r.action == "drain"), key=lambda r: r.sequence)
    approved = next(r for r in records if r.action == "drain" and r.state == "approved")
    assert rows[0][:10] == ("drain", 5, "done", "c1", None, "node-a02", "alice", "checked",
                            approved.decision.at, "dry_run")
    assert rows[0][10] == drain.result
    assert rows[0][10].startswith(f"returned to service: certification dcgm-diag-r2 ({cert.certification_id}) "
                                  f"of node-a02 passed at {format_utc(cert.finished_at)}; dry_run resume: dry-run: would do: "
                                  "resume host=node-a02")
    assert rows[0][11:] == ("dry_run", "faultstream-default", [])
    # each decision is at the runner's own clock when it received the command (not the command's "at")
    reboot_approved = next(r for r in records if r.action == "reboot" and r.state == "approved")
    assert reboot_approved.decision.at > approved.decision.at
    assert rows[1][:10] == ("reboot", 4, "done", "c1", None, "node-a02", "alice", "checked",
                            reboot_approved.decision.at, "dry_run")
    assert rows[1][10].startswith("dry_run: dry-run: would do: reboot host=node-a02")


def test_certifications_are_stored_once_with_their_failed_tests(sink: ClickHouseSink, lifecycle) -> None:
    _, passed = lifecycle
    failed = Certification(host="node-a02", cluster="c1", suite="dcgm-diag-r2", passed=False,
                           finished_at=passed.finished_at - 3600 * NS,
                           tests=[CertificationTest(name="memory", result="fail", detail="GPU1: DBE"),
                                  CertificationTest(name="pcie", result="warn")])
    assert sink.write_certifications([passed, failed, passed]) == 2  # id filled from content
    assert sink.write_certifications([failed]) == 1
    assert sink.count("certifications", final=True) == 2
    rows = sink.client.query(
        f"SELECT passed, tests, tests_failed, host, suite FROM {sink.database}.certifications FINAL ORDER BY passed"
    ).result_rows
    assert rows == [(False, ["memory:fail", "pcie:warn"], ["memory"], "node-a02", "dcgm-diag-r2"),
                    (True, ["memory:pass", "pcie:pass"], [], "node-a02", "dcgm-diag-r2")]
    back = {c.passed: c for c in sink.fetch("certifications")}
    assert back[True] == passed
    assert back[False].tests[0].detail == "GPU1: DBE"


def test_an_old_state_rank_table_is_renamed_not_reused(chdb_dir: Path, lifecycle) -> None:
    records, _ = lifecycle
    db = f"legacy{next(_db)}"
    with ClickHouseSink(f"chdb://{chdb_dir}", database=db) as first:
        client = first.client
        client.command(f"DROP TABLE {db}.remediations")
        client.command(f"CREATE TABLE {db}.remediations (action_id String, state_rank UInt8, record String) "
                       "ENGINE = ReplacingMergeTree(state_rank) ORDER BY action_id")
        client.command(f"INSERT INTO {db}.remediations VALUES ('act-old', 4, '{{}}')")
    with ClickHouseSink(f"chdb://{chdb_dir}", database=db) as sink:
        names = [r[0] for r in sink.client.query(
            f"SELECT name FROM system.tables WHERE database = '{db}' AND name LIKE 'remediation%' ORDER BY name"
        ).result_rows]
        assert names == ["remediation_transitions", "remediations", "remediations_state_rank_1"]
        assert sink.client.command(f"SELECT action_id FROM {db}.remediations_state_rank_1") == "act-old"
        assert sink.write_remediations(records) == 9
        assert sink.count("remediations") == 2
    with ClickHouseSink(f"chdb://{chdb_dir}", database=db) as again:  # the current table is kept
        assert again.count("remediations") == 2
