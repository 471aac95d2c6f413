"""Issue 33 items 2 and 6: host memory pressure behind a SIGKILL (correlators/rules/memory.yaml,
the ``sigkill_memory_pressure`` detector) and back-dating only from a line's own time
(``correlators.rules.engine.backdate``), with their example bundles and counter-cases."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pytest

from correlators.attribution import WorkloadInfo, decide
from correlators.enrich import Allocation
from correlators.rules import load_rule_pack
from schemas.bundle import WorkloadSpec
from schemas.records import TIME_QUALITY_INHERITED, Event, Observation, Position, Source

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "incidents"
T0 = 1_796_000_000 * 10**9
S = 10**9
PACK = load_rule_pack()
WATCHDOG = ("[E ProcessGroupNCCL.cpp:563] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL("
            "SeqNum=88120, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, Timeout(ms)=600000) ran for 600015 "
            "milliseconds before timing out.")


def obs(body: str, *, quality: float, source: str, line: int = 10, time_from: int | None = None) -> Observation:
    return Observation(
        source=Source(connector="bundle", instance="t"), kind="log_line", observed_at=T0,
        time_source=source, time_quality=quality, host="node-a01", cluster="c1", workload_id="job-1",
        body=body, attributes={} if time_from is None else {"time_from_line": time_from},
        position=Position(file="logs/node-a01/train.log", line=line),
    ).with_id()


# ----------------------------------------------------------------------------- item 6: back-dating


def test_own_time_is_backdated_by_ran_for():
    (ev,) = [e for e in PACK.extract(obs(WATCHDOG, quality=0.9, source="line")) if e.type == "nccl.watchdog_timeout"]
    assert ev.began_at == T0 - 600_015 * 10**6 and "began_at_bound" not in ev.attributes


def test_time_inherited_from_an_earlier_line_is_a_bound_not_a_timestamp():
    o = obs(WATCHDOG, quality=TIME_QUALITY_INHERITED, source="inferred", line=10, time_from=9)
    (ev,) = [e for e in PACK.extract(o) if e.type == "nccl.watchdog_timeout"]
    # placed at the earlier neighbour's time, never before it
    assert ev.began_at == T0 == ev.at and ev.effective_at == T0
    assert ev.attributes["began_at_bound"] == "inherited"
    assert ev.time_quality <= TIME_QUALITY_INHERITED


def test_live_tail_inherited_time_without_its_line_is_the_earlier_neighbours():
    o = obs(WATCHDOG, quality=TIME_QUALITY_INHERITED, source="inferred")
    (ev,) = [e for e in PACK.extract(o) if e.type == "nccl.watchdog_timeout"]
    assert ev.began_at == T0


@pytest.mark.parametrize("source,time_from", [("inferred", 11), ("transport", None)])
def test_a_latest_bound_still_backdates(source, time_from):
    # a later line's time or the transport's (the workload end): the stall began no later than
    # that less ran-for -- the cost counted from there is never more than what was lost
    quality = TIME_QUALITY_INHERITED if source == "inferred" else 0.2
    o = obs(WATCHDOG, quality=quality, source=source, line=10, time_from=time_from)
    (ev,) = [e for e in PACK.extract(o) if e.type == "nccl.watchdog_timeout"]
    assert ev.began_at == T0 - 600_015 * 10**6 and "began_at_bound" not in ev.attributes


def replay(name: str) -> list[dict]:
    out = subprocess.run([sys.executable, "-m", "streams.cli", "replay", str(EXAMPLES / name), "--json", "--no-store"],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout
    return [json.loads(l) for l in out.splitlines() if l.strip()]


def workload_verdict(name: str) -> dict:
    (v,) = [a for a in replay(name) if a["scope"]["kind"] == "workload"]
    return v


@pytest.mark.slow
def test_undated_pytorch22_watchdog_cost_is_not_doubled():
    undated = workload_verdict("backdate-undated-watchdog-pt22")
    dated = workload_verdict("backdate-dated-watchdog-counter")
    step_4120 = T_STEP
    assert undated["root_cause"]["code"] == dated["root_cause"]["code"] == "nccl.stalled_rank"
    assert undated["culprits"]["ranks"] == dated["culprits"]["ranks"] == [6]
    # the stall is placed no earlier than the last dated step, not 600 s before it
    assert undated["cost"]["lost_from"] == step_4120
    assert dated["cost"]["lost_from"] >= step_4120
    # ... and the hours lost are those of the dated case, not twice them
    assert abs(undated["cost"]["gpu_hours_lost"] - dated["cost"]["gpu_hours_lost"]) < 0.01
    assert undated["quality"] != "definitive"


T_STEP = 1_796_020_300_118_000_000  # 2026-11-30T06:31:40.118Z, step 4120 of the back-dating bundles


# ----------------------------------------------------------------------------- item 2: memory


@pytest.mark.parametrize("name,code,ranks", [
    ("memory-sigkill-psi-full", "host.oom_kill.probable", [5]),
    ("memory-sigkill-psi-healthy", "proc.killed.sigkill", [5]),
    ("memory-sigkill-deepspeed-cgroup-events", "host.oom_kill.probable", [2]),
    ("memory-sigkill-deepspeed-healthy", "proc.killed.sigkill", [2]),
])
@pytest.mark.slow
def test_sigkill_bundles(name, code, ranks):
    first, second = replay(name), replay(name)
    assert first == second
    (v,) = [a for a in first if a["scope"]["kind"] == "workload"]
    assert v["root_cause"]["code"] == code and v["culprits"]["ranks"] == ranks and v["domain"] == "host"
    if code == "host.oom_kill.probable":
        assert v["quality"] == "probable"
        assert any(a["code"] == "proc.killed.sigkill" for a in v["alternatives"])
        assert any(e["type"] == "host.memory_pressure" and e["role"] == "cause" for e in v["evidence"])


def _spec() -> WorkloadSpec:
    start = dt.datetime.fromtimestamp(T0 / S, tz=dt.timezone.utc)
    return WorkloadSpec(workload_id="job-1", cluster="c1", state="FAILED", start=start,
                        end=start + dt.timedelta(seconds=3600), nodes=["node-a01", "node-a02"], ranks_per_node=4)


def _ev(type_, at_s, host, rank=None, **attrs) -> Event:
    return Event(type=type_, at=T0 + int(at_s * S), host=host, cluster="c1", workload_id="job-1", rank=rank,
                 attributes=attrs, rule=f"test.{type_}@1").with_id()


def _decide(events):
    s = _spec()
    alloc = Allocation.from_workload(s)
    return decide(WorkloadInfo.from_spec(s), alloc, [alloc.enrich(e) for e in events], [], ruleset_version="t")


def _kill(at_s=1000):
    return [_ev("proc.killed", at_s, "node-a02", rank=5, signal=9, signal_name="SIGKILL", exitcode=-9),
            _ev("net.connection_reset", at_s + 2, "node-a01", rank=0)]


def _psi(at_s, host="node-a02", full=35.0):
    return _ev("host.memory_pressure", at_s, host, source="psi", kind="full", avg10=full, avg60=full / 2,
               avg300=full / 4, scope="system")


def test_sigkill_with_psi_full_before_it_is_a_probable_host_oom():
    v = _decide(_kill() + [_psi(970)])
    assert v.root_cause.code == "host.oom_kill.probable" and v.culprits.hosts == ["node-a02"]
    assert v.quality == "probable"


@pytest.mark.parametrize("extra", [
    [_psi(970, full=2.0)],                 # healthy memory
    [_psi(970, host="node-a01")],          # pressure on another host
    [_psi(1000 - 900)],                    # too long before the kill (lead_s 600)
    [_psi(1000 + 300)],                    # a level reading long after the kill
    [_ev("host.memory_pressure", 990, "node-a02", source="trainer", used_pct=71.0)],
    [_ev("host.memory_pressure", 1500, "node-a02", source="cgroup_v2", cumulative=True, oom_kill=0, max=0)],
])
def test_counter_cases_keep_the_sigkill_as_it_was(extra):
    assert _decide(_kill() + extra).root_cause.code == "proc.killed.sigkill"


def test_cumulative_counter_after_the_kill_counts():
    v = _decide(_kill() + [_ev("host.memory_pressure", 1500, "node-a02", source="cgroup_v2", cumulative=True,
                               oom_kill=1)])
    assert v.root_cause.code == "host.oom_kill.probable"


def test_meminfo_pairs_available_with_total():
    low = [_ev("host.memory_pressure", 980, "node-a02", source="meminfo", mem_total_bytes=100 * 2**30),
           _ev("host.memory_pressure", 980, "node-a02", source="meminfo", mem_available_bytes=3 * 2**30)]
    assert _decide(_kill() + low).root_cause.code == "host.oom_kill.probable"


def test_a_kernel_oom_line_decides_by_itself():
    oom = _ev("host.oom_kill", 999, "node-a02", source="kernel", pid=4242, process="python3", cgroup=False)
    v = _decide(_kill() + [oom, _psi(970)])
    assert v.root_cause.code == "host.oom_kill" and v.root_cause.code != "host.oom_kill.probable"
