"""The Slurm connector against a real single-node Slurm 22.05 (``slurm_cluster``), plus the
cursor store and the parsers on output captured from that Slurm (``tests/data/slurm``)."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from connectors.cursor import CursorError, CursorStore
from connectors.runner import run
from connectors.slurm import (
    SCHEDULER_HOST,
    SlurmConnector,
    SlurmError,
    expand_hostlist,
    parse_scontrol_nodes,
)
from correlators.rules import load_rule_pack
from schemas.records import Observation
from tests.slurm_fixtures import slurm_cluster  # noqa: F401

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "PREEMPTED", "BOOT_FAIL", "DEADLINE"}


# ---- helpers ------------------------------------------------------------------------------------

def sbatch(*args: str) -> str:
    out = subprocess.run(["sbatch", "--parsable", "-o", "/dev/null", *args], check=True,
                         capture_output=True, text=True, cwd="/tmp")
    return out.stdout.strip().split(";")[0]


def sacct_state(job: str) -> str:
    out = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "State"],
                         capture_output=True, text=True, check=True).stdout.split()
    return out[0].split()[0] if out else ""


def wait_until(cond, timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def runs(job: str, program: str) -> bool:
    """True when a process of ``job`` on this node (``scontrol listpids``) runs ``program``
    (the first word of its ``/proc/<pid>/cmdline``)."""
    out = subprocess.run(["scontrol", "listpids", job], capture_output=True, text=True, check=False).stdout
    for line in out.splitlines()[1:]:
        pid = line.split()[0] if line.split() else ""
        if not pid.isdigit():
            continue
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].decode(errors="replace") == program:
            return True
    return False


def wait_terminal(*jobs: str, timeout: float = 90.0) -> None:
    wait_until(lambda: all(sacct_state(j) in TERMINAL for j in jobs), timeout,
               f"jobs {jobs} to finish in sacct")


def poll_until(conn: SlurmConnector, done, timeout: float = 60.0) -> list[Observation]:
    """Poll (and commit) until ``done(all observations so far)``; return them all."""
    got: list[Observation] = []
    deadline = time.monotonic() + timeout
    while True:
        got.extend(conn.poll())
        conn.commit()
        if done(got):
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"connector did not report in {timeout:g} s; got "
                                 f"{[(o.attributes.get('job_id'), o.attributes.get('state')) for o in got]}")
        time.sleep(0.5)


def job_states(obs: list[Observation], job_id: str) -> list[str]:
    return [o.attributes["state"] for o in obs if o.attributes.get("job_id") == job_id]


def one(obs: list[Observation], job_id: str, state: str) -> Observation:
    hits = [o for o in obs if o.attributes.get("job_id") == job_id and o.attributes.get("state") == state]
    assert len(hits) == 1, (job_id, state, [(o.attributes.get("job_id"), o.attributes.get("state")) for o in obs])
    return hits[0]


def connector(cluster, tmp_path: Path, **kw) -> SlurmConnector:
    return SlurmConnector(cluster.name, cursor=CursorStore(tmp_path / "slurm.cursor.json"), **kw)


# ---- jobs on the real Slurm ---------------------------------------------------------------------

def test_job_transitions_real_slurm(slurm_cluster, tmp_path):
    node = slurm_cluster.node
    conn = connector(slurm_cluster, tmp_path, poll_s=0.5)
    conn.poll()
    conn.commit()  # baseline: whatever ran before this test

    ok = sbatch("--wrap", "true")
    fail = sbatch("--wrap", "exit 3")
    killed = sbatch("--wrap", "kill -9 $$")
    mpi = sbatch("-N1", "-n2", "--wrap", "srun -n2 true; srun -n2 sh -c 'exit 5'")
    # The sleeper is cancelled once its program runs. sacct says RUNNING as soon as the job is
    # allocated, before slurmstepd has started the batch script; a cancel while the step is set
    # up (or while its shell is between two commands) is recorded on Slurm 22.05 as the batch
    # step FAILED 15:0, not CANCELLED. The script execs sleep: once a process of the job
    # (scontrol listpids) is that sleep, the cancel's SIGTERM ends the program itself.
    sleeper = sbatch("--wrap", "exec sleep 120")
    wait_until(lambda: runs(sleeper, "sleep"), 90, "the sleeper's sleep to run")
    subprocess.run(["scancel", sleeper], check=True)
    wait_terminal(ok, fail, killed, mpi, sleeper)

    jobs = (ok, fail, killed, mpi, sleeper)
    # every record asserted below: the jobs' final states and the steps' (sacct may show a
    # job's end before its steps')
    steps = {f"{killed}.batch": "CANCELLED", f"{fail}.batch": "FAILED", f"{mpi}.0": "COMPLETED",
             f"{mpi}.1": "FAILED", f"{sleeper}.batch": "CANCELLED"}
    obs = poll_until(conn, lambda got: all(set(job_states(got, j)) & TERMINAL for j in jobs)
                     and all(state in job_states(got, step) for step, state in steps.items()), timeout=90)

    ids = [o.observation_id for o in obs]
    assert len(ids) == len(set(ids)), "an observation was emitted twice"
    for o in obs:
        assert o.kind == "scheduler_event"
        assert o.source.connector == "slurm" and o.source.instance == slurm_cluster.name
        assert o.cluster == slurm_cluster.name

    # every job: PENDING -> RUNNING -> final, each once, in time order
    for job, final in ((ok, "COMPLETED"), (fail, "FAILED"), (killed, "FAILED"), (mpi, "FAILED"),
                       (sleeper, "CANCELLED")):
        assert job_states(obs, job) == ["PENDING", "RUNNING", final], job
        p, r, f = (one(obs, job, s) for s in ("PENDING", "RUNNING", final))
        assert p.observed_at <= r.observed_at <= f.observed_at
        assert p.host == r.host == f.host == SCHEDULER_HOST
        assert p.workload_id == f.workload_id == job
        assert f.attributes["nodes"] == [node] and r.attributes["nodes"] == [node]
        assert "nodes" not in p.attributes
        assert f.observed_at == f.attributes["end_ns"] and r.observed_at == r.attributes["start_ns"]
        assert f.attributes["end_ns"] % 1_000_000_000 == 0 and f.attributes["end_ns"] > 1.7e18
        assert abs(f.attributes["end_ns"] / 1e9 - time.time()) < 600

    assert one(obs, ok, "COMPLETED").attributes["exit_code"] == 0
    assert "signal" not in one(obs, ok, "COMPLETED").attributes
    assert one(obs, fail, "FAILED").attributes["exit_code"] == 3
    assert one(obs, fail, "FAILED").attributes["exit_status"] == "3:0"
    assert one(obs, killed, "FAILED").attributes["signal"] == 9
    assert one(obs, f"{killed}.batch", "CANCELLED").attributes["signal"] == 9
    assert one(obs, mpi, "FAILED").attributes["exit_code"] == 5

    # steps: on the node, with the rank layout of the srun steps
    b = one(obs, f"{fail}.batch", "FAILED")
    assert b.host == node and b.workload_id == fail and b.attributes["step"] == "batch"
    assert b.attributes["exit_code"] == 3
    s0 = one(obs, f"{mpi}.0", "COMPLETED")
    s1 = one(obs, f"{mpi}.1", "FAILED")
    assert job_states(obs, f"{mpi}.0") == ["RUNNING", "COMPLETED"]
    for s in (s0, s1):
        assert s.host == node and s.attributes["ntasks"] == 2 and s.attributes["tasks_per_node"] == 2
        assert s.attributes["ranks"] == {node: [0, 1]}
    assert s1.attributes["exit_code"] == 5
    assert one(obs, mpi, "RUNNING").attributes["tasks_per_node"] == 2
    assert one(obs, f"{sleeper}.batch", "CANCELLED").host == node

    # the bodies are sacct rows the sched rules read
    pack = load_rule_pack()
    for job, state, code in ((ok, "COMPLETED", "0:0"), (fail, "FAILED", "3:0"),
                             (f"{fail}.batch", "FAILED", "3:0"), (killed, "FAILED", "0:9"),
                             (f"{mpi}.1", "FAILED", "5:0"), (sleeper, "CANCELLED", None)):
        o = one(obs, job, state)
        events = pack.extract(o)
        assert [e.type for e in events] == ["sched.job_state"], (o.body, events)
        ev = events[0]
        assert ev.attributes["job_id"] == job and ev.attributes["state"] == state
        if code is not None:
            assert ev.attributes["exit_code"] == code
        assert ev.at == o.observed_at and ev.host == o.host and ev.workload_id == o.workload_id
    # nothing new on the next poll
    assert [o for o in conn.poll() if o.attributes.get("job_id", "").split(".")[0] in jobs] == []


def test_restart_from_cursor_no_loss_no_duplicates(slurm_cluster, tmp_path):
    c1 = connector(slurm_cluster, tmp_path)
    c1.poll()
    c1.commit()
    early = sbatch("--wrap", "exit 2")
    running = sbatch("--wrap", "sleep 6")
    wait_terminal(early)
    wait_until(lambda: sacct_state(running) == "RUNNING", 60, "job to run")
    first = poll_until(c1, lambda got: "FAILED" in job_states(got, early)
                       and "RUNNING" in job_states(got, running))
    assert job_states(first, running) == ["PENDING", "RUNNING"]
    del c1  # the connector goes down

    # while it is down: one job runs from start to end, the running one ends
    downtime = sbatch("--wrap", "sleep 1; exit 7")
    wait_terminal(downtime, running)

    c2 = connector(slurm_cluster, tmp_path)
    # not committed: delivery "fails". sacct may lag behind slurmctld (right after a slurmctld
    # start a job's eligible time reaches slurmdbd late, and window queries skip the job until
    # then): later polls of the same window pick it up.
    batch: list[Observation] = []
    deadline = time.monotonic() + 60
    while "FAILED" not in job_states(batch, downtime) and time.monotonic() < deadline:
        batch.extend(c2.poll())
        time.sleep(0.5)
    assert job_states(batch, downtime) == ["PENDING", "RUNNING", "FAILED"]
    assert one(batch, downtime, "FAILED").attributes["exit_code"] == 7
    assert job_states(batch, running) == ["COMPLETED"]  # only what is new
    assert job_states(batch, early) == []
    del c2

    # restarted again from the same (uncommitted) cursor: the same observations, same ids
    c3 = connector(slurm_cluster, tmp_path)
    again = c3.poll()
    mine = {downtime, f"{downtime}.batch", running, f"{running}.batch"}
    pick = lambda obs: sorted(o.observation_id for o in obs if o.attributes.get("job_id") in mine)
    assert pick(again) == pick(batch) and pick(again)
    c3.commit()
    # committed: a fresh connector emits none of them again
    c4 = connector(slurm_cluster, tmp_path)
    assert pick(c4.poll()) == []


class FlakyProducer:
    """Stands in for a RecordProducer: the first flush of a batch holding ``job`` fails (the
    broker is down), every other flush delivers into ``published``."""

    def __init__(self, job: str) -> None:
        self.job = job
        self.queued: list[Observation] = []
        self.published: list[list[Observation]] = []
        self.failures = 1

    def send(self, key: str, record: Observation, *, topic: str | None = None) -> None:
        self.queued.append(record)

    def flush(self, timeout: float = 60.0) -> int:
        batch, self.queued = self.queued, []
        if self.failures and any(o.attributes.get("job_id") == self.job for o in batch):
            self.failures -= 1
            raise ConnectionError("broker unavailable")
        if batch:
            self.published.append(batch)
        return 0


def test_runner_follow_publishes_retries_and_saves_the_cursor(slurm_cluster, tmp_path):
    conn = connector(slurm_cluster, tmp_path, poll_s=0.3)
    conn.poll()
    conn.commit()
    stop = threading.Event()
    job = sbatch("--wrap", "true")
    producer = FlakyProducer(job)
    t = threading.Thread(target=run, args=(conn, producer), daemon=True,
                         kwargs=dict(cursor=conn.cursor, follow=True, poll_s=0.3, stop=stop, retry=True))
    t.start()
    try:
        wait_until(lambda: any(o.attributes.get("job_id") == job and o.attributes["state"] == "COMPLETED"
                               for b in producer.published for o in b), 60, "the runner to publish the job")
    finally:
        stop.set()
        t.join(10)
    assert not t.is_alive()
    assert producer.failures == 0  # the first delivery of the job failed: its batch came again
    flat = [o for b in producer.published for o in b]
    assert job_states(flat, job) == ["PENDING", "RUNNING", "COMPLETED"]
    saved = CursorStore(tmp_path / "slurm.cursor.json").load()
    assert saved["jobs"][f"job:{job}"]["state"] == "COMPLETED"
    (cov,) = conn.coverage()
    assert cov.source == f"slurm:{slurm_cluster.name}" and cov.status == "present" and cov.records >= 3


# ---- nodes on the real Slurm --------------------------------------------------------------------

def test_node_drain_and_resume(slurm_cluster, tmp_path):
    node = slurm_cluster.node
    reason = "gres/gpu count reported lower than configured"
    conn = connector(slurm_cluster, tmp_path)
    conn.poll()
    conn.commit()
    t0 = int(time.time())
    subprocess.run(["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"],
                   check=True)
    try:
        obs = [o for o in conn.poll() if o.attributes.get("node") == node]
        conn.commit()
    finally:
        subprocess.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], check=True)
    assert len(obs) == 1, [o.body for o in obs]
    o = obs[0]
    assert o.host == node and o.workload_id is None and o.kind == "scheduler_event"
    assert o.attributes["state"] in ("DRAINED", "DRAINING")
    assert "DRAIN" in o.attributes["state_raw"]
    assert o.attributes["reason"] == reason
    assert o.attributes["reason_user"] == "root"
    assert o.time_source == "line" and abs(o.observed_at // 1_000_000_000 - t0) <= 2
    events = load_rule_pack().extract(o)
    assert {e.type for e in events} == {"sched.node_state"}
    by_attr = {}
    for e in events:
        assert e.host == node and e.attributes["node"] == node
        by_attr.update(e.attributes)
    assert by_attr["reason"] == reason and by_attr["state"] == o.attributes["state"]

    wait_until(lambda: subprocess.run(["sinfo", "-h", "-n", node, "-o", "%T"], capture_output=True,
                                      text=True).stdout.strip() == "idle", 30, "node idle again")
    back = [o for o in conn.poll() if o.attributes.get("node") == node]
    assert len(back) == 1 and back[0].attributes["state"] == "IDLE"
    assert back[0].attributes["previous_state"] == o.attributes["state"]
    assert "reason" not in back[0].attributes
    ev = load_rule_pack().extract(back[0])
    assert [(e.type, e.attributes["state"]) for e in ev] == [("sched.node_state", "IDLE")]
    conn.commit()
    assert [o for o in conn.poll() if o.attributes.get("node") == node] == []


def test_missing_command_is_a_clear_error(slurm_cluster, tmp_path):
    conn = connector(slurm_cluster, tmp_path, sacct="/nonexistent/sacct")
    with pytest.raises(SlurmError, match="command not found"):
        conn.poll()
    assert not (tmp_path / "slurm.cursor.json").exists()


# ---- captured output (tests/data/slurm, anonymised from the test cluster) ------------------------

def test_captured_sacct_json_22_05(tmp_path):
    doc = json.loads((DATA / "sacct-json-22.05.8.json").read_text())
    assert doc["meta"]["plugin"]["type"] == "openapi/dbv0.0.38"
    assert doc["meta"]["Slurm"]["release"] == "22.05.8"
    codes = {}
    for line in (DATA / "sacct-exitcode-22.05.8.txt").read_text().splitlines():
        k, _, v = line.partition("|")
        codes[k] = v
    # why the connector reads ExitCode as text too: 22.05's JSON says 0 for "exit 3"
    job2 = next(j for j in doc["jobs"] if j["job_id"] == 2)
    assert job2["state"]["current"] == "FAILED" and job2["exit_code"]["return_code"] == 0
    assert codes["2"] == "3:0"

    conn = SlurmConnector("fs-test", cursor=CursorStore(tmp_path / "c.json"))
    state = {"version": 1, "cluster": "fs-test", "since": None, "jobs": {}, "nodes": {}}
    obs = conn.transitions(state, doc["jobs"], codes, {}, now_s=1796005200)
    finals = {o.attributes["job_id"]: o for o in obs if o.attributes["state"] in TERMINAL}
    assert {k: (v.attributes["state"], v.attributes["exit_code"], v.attributes.get("signal"))
            for k, v in finals.items()} == {
        "1": ("COMPLETED", 0, None), "1.batch": ("COMPLETED", 0, None),
        "2": ("FAILED", 3, None), "2.batch": ("FAILED", 3, None),
        "3": ("CANCELLED", 0, None),
        "4": ("FAILED", 0, 9), "4.batch": ("CANCELLED", 0, 9),
        "5": ("FAILED", 5, None), "5.batch": ("FAILED", 5, None),
        "5.0": ("COMPLETED", 0, None), "5.1": ("FAILED", 5, None),
    }
    assert finals["5"].attributes["nodes"] == ["node-a01"]
    assert finals["5"].attributes["ranks"] == {"node-a01": [0, 1]}
    assert finals["5.1"].host == "node-a01" and finals["5"].host == SCHEDULER_HOST
    assert finals["3"].attributes["nodes"] == []  # cancelled while pending: "None assigned"
    assert job_states(obs, "3") == ["PENDING", "CANCELLED"]
    assert finals["2"].observed_at == 1796005059 * 10**9
    # the same input again: nothing new; a fresh state: the same ids
    assert conn.transitions(state, doc["jobs"], codes, {}, now_s=1796005210) == []
    fresh = {"version": 1, "cluster": "fs-test", "since": None, "jobs": {}, "nodes": {}}
    again = conn.transitions(fresh, doc["jobs"], codes, {}, now_s=1796005300)
    assert [o.observation_id for o in again] == [o.observation_id for o in obs]


def test_captured_scontrol_node_line():
    nodes = parse_scontrol_nodes((DATA / "scontrol-show-node-22.05.8.txt").read_text())
    n = nodes["node-a01"]
    assert n["State"] == "IDLE+DRAIN"
    assert n["OS"].startswith("Linux 6.1.0-28-amd64 #1 SMP")
    assert n["Reason"].startswith("gres/gpu count reported lower than configured [user-a@")
    conn = SlurmConnector("fs-test", cursor=CursorStore("/nonexistent/never-written.json"))
    state: dict = {"jobs": {}, "nodes": {}}
    obs = conn.transitions(state, [], {}, nodes, now_s=1796005300)
    assert len(obs) == 1
    o = obs[0]
    assert o.body == ("update_node: node node-a01 state set to DRAINED\n"
                      "update_node: node node-a01 reason set to: gres/gpu count reported lower than configured")
    assert o.attributes["reason_user"] == "user-a"
    assert conn.transitions(state, [], {}, nodes, now_s=1796005310) == []


def test_expand_hostlist():
    assert expand_hostlist("node-a[01-03,07],gpu1") == ["node-a01", "node-a02", "node-a03", "node-a07", "gpu1"]
    assert expand_hostlist("r[1-2]n[8-9]") == ["r1n8", "r1n9", "r2n8", "r2n9"]
    assert expand_hostlist("None assigned") == [] and expand_hostlist(None) == []
    with pytest.raises(ValueError):
        expand_hostlist("node-a[01-03")


# ---- the cursor store ---------------------------------------------------------------------------

def test_cursor_store(tmp_path):
    store = CursorStore(tmp_path / "sub" / "c.json")
    assert store.load() == {}
    store.save({"since": 5, "jobs": {"job:1": {"state": "RUNNING"}}, "név": "ü"})
    assert store.load() == {"since": 5, "jobs": {"job:1": {"state": "RUNNING"}}, "név": "ü"}
    store.save({"since": 6})
    assert store.load() == {"since": 6}
    assert os.listdir(tmp_path / "sub") == ["c.json"]  # no temporary file left behind
    with pytest.raises(TypeError):
        store.save({"bad": object()})
    assert store.load() == {"since": 6}  # a failed save leaves the old cursor
    assert os.listdir(tmp_path / "sub") == ["c.json"]
    (tmp_path / "sub" / "c.json").write_text('{"since": 6')
    with pytest.raises(CursorError, match="corrupted"):
        store.load()
    (tmp_path / "sub" / "c.json").write_text("[1, 2]")
    with pytest.raises(CursorError, match="JSON object"):
        store.load()
    store.clear()
    assert store.load() == {}


def test_cursor_of_another_cluster_is_refused(tmp_path):
    store = CursorStore(tmp_path / "c.json")
    store.save({"version": 1, "cluster": "other", "since": 1, "jobs": {}, "nodes": {}})
    with pytest.raises(SlurmError, match="other"):
        SlurmConnector("fs-test", cursor=store).poll()


def test_sacct_nothing_found_is_an_empty_window(tmp_path):
    """sacct --json on a window with no job: 'Nothing found' (error 9003), as slurmdbd 22.05
    answered on a fresh cluster in CI; the connector reads it as no jobs, not a failure."""
    reply = {"meta": {"Slurm": {"release": "22.05.8"}}, "jobs": [], "errors": [
        {"description": "Nothing found", "error_number": 9003, "error": "Nothing found with query",
         "source": "slurmdb_jobs_get"}]}
    fake = tmp_path / "sacct"
    fake.write_text("#!/bin/sh\ncase \"$*\" in *--json*) cat \"$(dirname \"$0\")/reply.json\";; esac\n")
    fake.chmod(0o755)
    (tmp_path / "reply.json").write_text(json.dumps(reply))
    conn = SlurmConnector("fs-test", cursor=CursorStore(tmp_path / "c.json"), sacct=str(fake))
    assert conn.fetch_jobs("2026-11-30T00:00:00", "2026-11-30T00:01:00") == ([], {})
    reply["errors"][0]["error_number"] = 1
    (tmp_path / "reply.json").write_text(json.dumps(reply))
    with pytest.raises(SlurmError, match="reported an error"):
        conn.fetch_jobs("2026-11-30T00:00:00", "2026-11-30T00:01:00")
