"""Issue 33 items 3, 4, 5: verbs/queue-pair setup errors as causes of their own, node-side
scheduler failures pinned on the node (through the scheduler's declared-aggregator mechanism,
correlators/identity.py), Kubernetes admission refusals tied to their node and GPU -- each with
its example bundle and counter-case (examples/make_setup_incidents.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from correlators.enrich import Allocation
from correlators.rules import load_rule_pack
from schemas.records import Observation, Position, Source

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "incidents"
T0 = 1_796_000_000 * 10**9
PACK = load_rule_pack()


def obs(body: str, host: str, kind: str = "log_line") -> Observation:
    return Observation(
        source=Source(connector="bundle", instance="t"), kind=kind, observed_at=T0, time_source="line",
        time_quality=0.9, host=host, cluster="c1", workload_id="job-1", body=body,
        position=Position(file=f"logs/{host}/x.log", line=1),
    ).with_id()


def replay(name: str) -> list[dict]:
    out = subprocess.run([sys.executable, "-m", "streams.cli", "replay", str(EXAMPLES / name), "--json", "--no-store"],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout
    return [json.loads(l) for l in out.splitlines() if l.strip()]


def test_modify_qp_fields_and_peer():
    line = ("node-a01:2201:2290 [1] misc/ibvwrap.cc:376 NCCL WARN Call to ibv_modify_qp failed with 110 Connection "
            "timed out, on dev mlx5_0:1, curr state INIT, next state RTR, local GID index 3, local GID ::ffff:10.0.0.11, "
            "remote GID ::ffff:10.0.0.12")
    (ev,) = PACK.extract(obs(line, "node-a01"))
    assert (ev.type, ev.peer, ev.attributes["next_state"], ev.attributes["errno"]) == (
        "nccl.ib_error", "10.0.0.12", "RTR", "ETIMEDOUT")
    alloc = Allocation(workload_id="job-1", cluster="c1", nodes=("node-a01", "node-a02"), ips={"10.0.0.12": "node-a02"})
    assert alloc.enrich(ev).attributes.get("peer_host") == "node-a02"


def test_scheduler_line_names_a_node_of_the_allocation_only():
    alloc = Allocation(workload_id="job-1", cluster="c1", nodes=("node-a01", "node-a03"))
    line = "srun: error: Task launch for StepId=1.0 failed on node {}: Job credential expired"
    (ev,) = PACK.extract(obs(line.format("node-a03"), "_scheduler"))
    ev = alloc.enrich(ev)
    assert (ev.host, ev.attributes["code"]) == ("node-a03", "cred_expired")
    (far,) = PACK.extract(obs(line.format("node-a07"), "_scheduler"))
    far = alloc.enrich(far)
    assert far.host == "_scheduler" and far.attributes["line_host"] == "node-a07"
    assert far.attributes["outside_allocation"] is True
    # from a node's own log the named host is evidence only
    (own,) = PACK.extract(obs(line.format("node-a03"), "node-a01"))
    assert own.host == "node-a01" and own.attributes["line_host"] == "node-a03"


def test_controller_munge_line_is_context():
    (ev,) = PACK.extract(obs("[2026-12-03T01:00:03.000] error: Munge decode failed: Rewound credential", "_scheduler"))
    assert ev.attributes["on_controller"] is True and ev.attributes["code"] == "munge_rewound"


@pytest.mark.parametrize("name, domain, code, hosts", [
    ("verbs-modify-qp-rtr-timeout", "config", "config.ib_peer_unreachable", ["node-a01"]),
    ("verbs-modify-qp-peer-link-down", "fabric", "fabric.", ["node-a02"]),
    ("verbs-loc-prot-gpudirect", "config", "config.gpudirect_rdma", ["node-a02"]),
    ("verbs-loc-prot-after-xid79", "gpu_hardware", "gpu.xid.79", ["node-a02"]),
    ("verbs-gid-change-completion-errors", "config", "config.gid_changed", ["node-a03"]),
    ("verbs-gid-change-after-link-flap", "fabric", "fabric.", ["node-a03"]),
    ("slurm-node-task-launch-cred-expired", "host", "host.", ["node-a03"]),
    ("slurm-node-prolog-after-xid79", "gpu_hardware", "gpu.xid.79", ["node-a03"]),
    ("k8s-admission-unhealthy-gpu", "gpu_hardware", "gpu.device_unhealthy", ["node-a02"]),
    ("k8s-admission-after-xid79", "gpu_hardware", "gpu.xid.79", ["node-a02"]),
])
@pytest.mark.slow
def test_setup_bundles(name, domain, code, hosts):
    first, second = replay(name), replay(name)
    assert first == second
    (v,) = [a for a in first if a["scope"]["kind"] == "workload"]
    assert v["domain"] == domain and v["root_cause"]["code"].startswith(code)
    assert v["culprits"]["hosts"] == hosts and "_scheduler" not in v["culprits"]["hosts"]


@pytest.mark.slow
def test_foreign_node_named_by_the_controller_blames_nobody_there():
    (v,) = [a for a in replay("slurm-node-foreign-node-named") if a["scope"]["kind"] == "workload"]
    assert v["root_cause"]["code"] == "app.exception" and v["culprits"]["hosts"] == ["node-a02"]
