"""Slurm step records (``scontrol listpids``) as a pid -> rank source.

* :mod:`connectors.slurm_pids` on every output form of Slurm 20.11 .. 25.05 (text table before
  and after 24.11, ``--json`` / ``--yaml`` of 24.11+), junk rows, missing headers, fuzzed text,
  and on the live output of the test machine's Slurm 22.05;
* the bundle reader's ``scheduler/<host>/`` files -> the workload record's ``task_pids`` ->
  :mod:`correlators.pids`, end to end through replay and the live pipeline (the stream's
  driver), in shuffled orders, with conflicting statements dropped.
"""

from __future__ import annotations

import gzip
import itertools
import json
import random
import shutil
import subprocess
from pathlib import Path

import pytest
import tenacity
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.bundle import BundleConnector
from connectors.publish import bundle_records
from connectors.slurm_pids import (
    ListpidsError,
    parse_listpids,
    slurm_job_of,
    task_pid_rows,
)
from correlators.enrich import Allocation
from correlators.pids import assign_ranks, pid_map, task_statements
from schemas.bundle import WorkloadSpec
from schemas.messages import SpecMessage, message_json, parse_workload_message
from schemas.records import Event, EvidenceRef, Observation, Position, canonical_json
from streams.replay import replay_bundle
from tests.slurm_fixtures import slurm_cluster  # noqa: F401

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "incidents"
WITH_TABLE = EXAMPLES / "slurm-listpids-xid31-pid-rank"
WITHOUT_TABLE = EXAMPLES / "slurm-listpids-xid31-pid-unstated"
TABLE = "scheduler/node-a01/scontrol-listpids.txt"

#: ``scontrol listpids 144`` on the test machine's Slurm 22.05.8 (``deploy/slurm``), job
#: ``sbatch -n 2 --wrap 'srun -n 2 sleep 30 & srun -n1 --overlap sleep 30 & wait'``: the
#: batch script is task 0 of the batch step, the sruns are ``-`` rows; every row ends in the
#: padding of ``%-8d``.
REAL_22_05 = "".join(line + "\n" for line in [
    "PID      JOBID    STEPID   LOCALID GLOBALID",
    "24397    144      batch    0       0       ",
    "24411    144      batch    -       -       ",
    "24402    144      batch    -       -       ",
    "24398    144      batch    -       -       ",
    "24399    144      batch    -       -       ",
    "24424    144      0        0       0       ",
    "24429    144      1        0       0       ",
    "24430    144      1        1       1       ",
])


# The printers use Slurm's own printf formats (%-8d ...), so the tests read what Slurm writes.
def row_20_11(pid, job, step, local, glob) -> str:
    """A row as Slurm 20.11 .. 24.05 print it (``_list_pids_one_step``)."""
    if local is None:
        return "%-8d %-8u %-8s %-7s %-8s\n" % (pid, job, step, "-", "-")
    return "%-8d %-8u %-8s %-7d %-8d\n" % (pid, job, step, local, glob)


def row_24_11(pid, job, step, local, glob) -> str:
    """A row as Slurm 24.11 .. 25.05 print it (``_print_listpids_info``: a space after each column)."""
    text = "%-8d %-8d %-8s " % (pid, job, step)
    text += ("%-7d " % local) if local is not None else ("%-7s " % "-")
    text += ("%-8d " % glob) if glob is not None else ("%-8s " % "-")
    return text + "\n"


HEADER = "%-8s %-8s %-8s %-7s %-8s\n" % ("PID", "JOBID", "STEPID", "LOCALID", "GLOBALID")


def rows_of(table) -> list[tuple]:
    return [(r.pid, r.job_id, r.step_id, r.local_id, r.global_id) for r in table.rows]


# ---------------------------------------------------------------------------------- parser


def test_real_22_05_output() -> None:
    table = parse_listpids(REAL_22_05)
    assert (table.format, table.headers, table.malformed, table.before_header) == ("text", 1, 0, 0)
    assert rows_of(table) == [
        (24397, 144, "batch", 0, 0), (24411, 144, "batch", None, None), (24402, 144, "batch", None, None),
        (24398, 144, "batch", None, None), (24399, 144, "batch", None, None), (24424, 144, "0", 0, 0),
        (24429, 144, "1", 0, 0), (24430, 144, "1", 1, 1)]
    assert [r.line for r in table.rows] == list(range(2, 10))
    assert [r.numbered_step for r in table.rows] == [False] * 5 + [True] * 3
    kept, skipped = task_pid_rows(table.rows, 144)
    # the batch script is task 0 of the batch step: no rank
    assert [(r.pid, r.step_id, r.global_id) for r in kept] == [(24424, "0", 0), (24429, "1", 0), (24430, "1", 1)]
    assert skipped == {"other_job": 0, "other_step": 0, "not_a_task": 0, "named_step": 5}
    kept, skipped = task_pid_rows(table.rows, 144, "1")
    assert [r.pid for r in kept] == [24429, 24430] and skipped["other_step"] == 6


@pytest.mark.parametrize("printer", [row_20_11, row_24_11], ids=["20.11-24.05", "24.11-25.05"])
def test_text_forms_of_every_version(printer) -> None:
    spec = [(596, 3301, "extern", None, None), (601, 3301, "batch", 0, 0), (644, 3301, "0", 0, 0),
            (647, 3301, "0", 3, 3), (655, 3301, "0", None, None), (700, 3301, "interactive", 0, 0),
            (701, 3301, "TDB", None, None), (702, 3301, "2+1", 1, 9), (4294967295, 4294967294, "4294967293", 7, 4000000000)]
    table = parse_listpids(HEADER + "".join(printer(*r) for r in spec))
    assert rows_of(table) == spec
    assert table.malformed == 0
    assert [r.numbered_step for r in table.rows] == [False, False, True, True, True, False, False, True, True]


def test_stderr_captured_with_the_table_is_skipped_and_counted() -> None:
    # 20.11 .. 24.05 print the header first, the error of a missing step goes to stderr
    before = HEADER + "StepId=3301.7 does not exist on node node-a01.\n" + row_20_11(647, 3301, "0", 3, 3)
    table = parse_listpids(before)
    assert rows_of(table) == [(647, 3301, "0", 3, 3)] and table.malformed == 1
    # 24.11+ collect first and print the header last (only without an error)
    after = "Unable to connect to slurmstepd: Connection refused\n\n" + HEADER + row_24_11(647, 3301, "0", 3, 3)
    table = parse_listpids(after)
    assert rows_of(table) == [(647, 3301, "0", 3, 3)]
    assert (table.before_header, table.malformed) == (1, 0)


def test_several_snapshots_are_one_table() -> None:
    text = HEADER + row_20_11(647, 3301, "0", 3, 3) + "\n" + HEADER + row_20_11(647, 3301, "0", 3, 3) \
        + row_20_11(648, 3301, "0", 4, 4)
    table = parse_listpids(text)
    assert table.headers == 2
    assert [r.pid for r in table.rows] == [647, 647, 648]
    assert [r.line for r in table.rows] == [2, 5, 6]


@pytest.mark.parametrize("junk", [
    "647 3301 0 3\n",                  # a column missing
    "647 3301 0 3 3 extra\n",          # one too many
    "pid 3301 0 3 3\n",                # pid not a number
    "647 job 0 3 3\n",                 # job id not a number
    "647 3301 step0 3 3\n",            # not a step Slurm names
    "647 3301 0 - 3\n",                # one task id given, the other not
    "647 3301 0 3 -\n",
    "0 3301 0 3 3\n",                  # pid 0
    "647 0 0 3 3\n",                   # job 0
    "647 3301 0 3 4294967296\n",       # over 32 bits
    "-647 3301 0 3 3\n",
    "647 3301 0 3.0 3\n",
    "\x00\x01\x02 garbage \ufffd\n",
])
def test_junk_rows_are_skipped_and_counted(junk: str) -> None:
    table = parse_listpids(HEADER + row_20_11(644, 3301, "0", 0, 0) + junk + row_20_11(647, 3301, "0", 3, 3))
    assert [r.pid for r in table.rows] == [644, 647]
    assert table.malformed == 1


@pytest.mark.parametrize("text", [
    "", "\n\n  \n",                                   # 24.11+ with no step on the node: nothing
    "24424    144      0        0       0\n",         # rows without their header
    "PID JOBID STEPID GLOBALID\n647 3301 0 3\n",      # another table
    "{\"jobs\": []}", "[1, 2]", "{not json", "pids: 3\n", "- a\n- b\n",
])
def test_no_header_is_a_clear_error(text: str) -> None:
    with pytest.raises(ListpidsError, match="header|empty"):
        parse_listpids(text)


def test_json_and_yaml_forms_of_24_11() -> None:
    """``scontrol --json listpids`` / ``--yaml``: data_parser v0.0.42 OPENAPI_LISTPIDS_INFO_RESP;
    task ids are UINT32_NO_VAL structs, or numbers/null in the parser's complex mode."""
    unset = {"set": False, "infinite": False, "number": 0}
    doc = {
        "pids": [
            {"global_task_id": unset, "local_task_id": unset, "job_id": 3301, "pid": 596, "step_id": "extern"},
            {"global_task_id": {"set": True, "infinite": False, "number": 3},
             "local_task_id": {"set": True, "infinite": False, "number": 3},
             "job_id": 3301, "pid": 647, "step_id": "0"},
            {"global_task_id": 4, "local_task_id": 4, "job_id": 3301, "pid": 648, "step_id": "0"},   # complex mode
            {"global_task_id": None, "local_task_id": None, "job_id": 3301, "pid": 655, "step_id": "0"},
            {"global_task_id": 4294967294, "local_task_id": 4294967294, "job_id": 3301, "pid": 656, "step_id": "0"},
            {"global_task_id": {"set": True, "number": "x"}, "local_task_id": 1, "job_id": 3301, "pid": 657, "step_id": "0"},
            {"pid": True, "job_id": 3301, "step_id": "0"},
            "not an entry",
        ],
        "meta": {"plugin": {"type": "openapi/slurmctld", "data_parser": "data_parser/v0.0.42"}},
        "errors": [{"description": "StepId=3301.7 does not exist on node node-a01", "error_number": 2}],
        "warnings": [],
    }
    want = [(596, 3301, "extern", None, None), (647, 3301, "0", 3, 3), (648, 3301, "0", 4, 4),
            (655, 3301, "0", None, None), (656, 3301, "0", None, None)]
    doc = json.loads(json.dumps(doc))  # no shared objects: Slurm's YAML has no aliases
    for text, fmt in ((json.dumps(doc, indent=2), "json"), ("---\n" + yaml.safe_dump(doc), "yaml")):
        table = parse_listpids(text)
        assert table.format == fmt
        assert rows_of(table) == want
        assert table.malformed == 3
        assert "1 error(s) reported by scontrol: StepId=3301.7 does not exist" in table.notes[0]
        assert [r.line for r in table.rows] == [1, 2, 3, 4, 5]


def test_yaml_aliases_are_refused() -> None:
    with pytest.raises(ListpidsError):
        parse_listpids("a: &x [1, 2]\npids: *x\n")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=400))
def test_any_text_is_rows_or_a_listpids_error(text: str) -> None:
    for candidate in (text, HEADER + text):
        try:
            table = parse_listpids(candidate)
        except ListpidsError:
            continue
        assert all(r.pid > 0 and r.job_id > 0 for r in table.rows)
        assert all((r.local_id is None) == (r.global_id is None) for r in table.rows)


_ROW = st.tuples(st.integers(1, 2**32 - 1), st.integers(1, 2**32 - 1),
                 st.sampled_from(["0", "1", "17", "batch", "extern", "interactive", "TDB", "0+1"]),
                 st.one_of(st.none(), st.integers(0, 4095)))


@settings(max_examples=200, deadline=None)
@given(st.lists(_ROW, max_size=30), st.sampled_from([row_20_11, row_24_11]))
def test_printed_rows_read_back(rows, printer) -> None:
    spec = [(pid, job, step, local, None if local is None else local * 3) for pid, job, step, local in rows]
    table = parse_listpids(HEADER + "".join(printer(*r) for r in spec))
    assert rows_of(table) == spec and table.malformed == 0


def test_workload_ids_that_name_a_job() -> None:
    assert slurm_job_of("3301") == (3301, None)
    assert slurm_job_of("job-3301") == (3301, None)
    assert slurm_job_of("job_3301") == (3301, None)
    assert slurm_job_of("3301.2") == (3301, "2")
    for other in ("1001_7", "1001+1", "job-0", "train-llama", "", "job-3301-retry"):
        assert slurm_job_of(other) is None, other


def _cmd(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    except OSError:
        return b""


def _started(table) -> bool:
    """Step 0 lists two tasks and both have exec'd ``sleep``."""
    tasks = [r for r in table.rows if r.step_id == "0" and r.global_id is not None]
    return len(tasks) == 2 and all(_cmd(r.pid).endswith(b"sleep") for r in tasks)


def test_live_scontrol_listpids(slurm_cluster) -> None:  # noqa: F811
    """The parser on what the test machine's Slurm prints for a running two-task step: the
    task pids it names are the ``sleep`` processes srun started."""
    job = subprocess.run(["sbatch", "--parsable", "-n", "2", "-o", "/dev/null", "--wrap", "srun -n 2 sleep 60"],
                         check=True, capture_output=True, text=True, timeout=30).stdout.strip().split(";")[0]

    @tenacity.retry(stop=tenacity.stop_after_delay(60), wait=tenacity.wait_fixed(0.5),
                    retry=tenacity.retry_if_result(lambda t: not _started(t)),
                    retry_error_callback=lambda state: pytest.fail(
                        f"step {job}.0 did not list two running sleep tasks within 60 s; last table: "
                        f"{state.outcome.result() if state.outcome and not state.outcome.failed else state.outcome}",
                        pytrace=False))
    def snapshot():
        out = subprocess.run(["scontrol", "listpids", job], capture_output=True, text=True, timeout=30,
                             check=False)  # a job not yet running: exit 1, retried
        return parse_listpids(out.stdout) if out.stdout.strip() else parse_listpids(HEADER)

    try:
        table = snapshot()
    finally:
        subprocess.run(["scancel", job], timeout=30, check=False)
    assert table.format == "text" and table.headers == 1 and table.malformed == 0
    assert {r.job_id for r in table.rows} == {int(job)}
    tasks, _ = task_pid_rows(table.rows, int(job))
    assert sorted((r.local_id, r.global_id) for r in tasks) == [(0, 0), (1, 1)]
    batch = [r for r in table.rows if r.step_id == "batch"]
    assert any(r.global_id == 0 for r in batch), "the batch script is task 0 of the batch step"


# ----------------------------------------------------------------------------- the bundle


def verdict(bundle: Path):
    return replay_bundle(bundle).attribution


def copy_bundle(tmp_path: Path, src: Path = WITHOUT_TABLE, name: str = "b") -> Path:
    dst = tmp_path / name
    shutil.copytree(src, dst)
    (dst / "expected.yaml").unlink()
    return dst


def table_text(rows: list[tuple], printer=row_20_11) -> str:
    return HEADER + "".join(printer(*r) for r in rows)


STEP0 = [(644 + i, 3302, "0", i, i) for i in range(8)]  # pid 647 is task 3


def test_example_bundle_names_the_rank_from_the_table() -> None:
    att = verdict(WITH_TABLE)
    assert att.root_cause.code == "app.cuda.illegal_address"
    assert att.culprits.hosts == ["node-a01"] and att.culprits.ranks == [3]
    counter = verdict(WITHOUT_TABLE)
    assert counter.root_cause.code == "app.cuda.illegal_address"
    assert counter.culprits.hosts == ["node-a01"] and counter.culprits.ranks == []


def test_reader_turns_the_table_into_task_pids_and_covers_it() -> None:
    conn = BundleConnector(WITH_TABLE)
    tasks = [(t.host, t.pid, t.rank, t.local_rank, t.step) for t in conn.workload.task_pids]
    assert tasks == [("node-a01", 644 + i, i, i, "0") for i in range(8)]
    assert conn.workload.task_pids[3].source == f"{TABLE}:12"
    list(conn.observations())
    entry = next(c for c in conn.coverage() if c.source == f"file:{TABLE}")
    assert (entry.status, entry.records, entry.unparsed) == ("present", 17, 0)
    assert "job-3301 (job 3301): 8 task pids" in entry.detail
    assert "3 of other jobs" in entry.detail and "2 not tasks ('-' ids)" in entry.detail
    assert "4 of batch/extern/interactive steps" in entry.detail
    # a step record is no host input: the node's coverage comes from its logs only
    assert not any(o.position.file == TABLE for o in conn.observations())


def test_the_workload_record_carries_the_table_to_the_stream() -> None:
    records, _ = bundle_records(WITH_TABLE)
    head = records[0]
    assert head.format == "workload_yaml"
    spec = WorkloadSpec.model_validate(head.attributes["workload"])
    assert [(t.pid, t.rank) for t in spec.task_pids] == [(644 + i, i) for i in range(8)]
    # through Kafka: the record and the worker's spec message round-trip as JSON
    again = Observation.model_validate_json(head.model_dump_json())
    assert WorkloadSpec.model_validate(again.attributes["workload"]) == spec
    message = parse_workload_message(message_json(SpecMessage(spec=spec)))
    assert message.spec.task_pids == spec.task_pids
    # a bundle without step records publishes the same record as before the field existed
    plain, _ = bundle_records(WITHOUT_TABLE)
    assert "task_pids" not in plain[0].attributes["workload"]
    assert "task_pids" not in WorkloadSpec.model_validate(plain[0].attributes["workload"]).model_dump(mode="json")


def live_verdict(records: list[Observation]):
    """The stream driver's verdict: the pipeline in live mode (provisional verdicts, idle
    timers; ``tests.correlators.test_pipeline.live_run``), records arriving one by one as JSON."""
    from tests.correlators.test_pipeline import live_run

    latest, _ = live_run([Observation.model_validate_json(obs.model_dump_json()) for obs in records])
    [verdict] = [a for a in latest.values() if a.scope.kind == "workload"]
    return verdict


def test_stream_in_shuffled_orders_gives_the_replay_verdict() -> None:
    replayed = verdict(WITH_TABLE)
    records, _ = bundle_records(WITH_TABLE)
    for seed in range(3):
        order = list(records)
        random.Random(seed).shuffle(order)
        got = live_verdict(order)
        assert got.culprits.ranks == [3], f"order {seed}"
        assert canonical_json(got.model_copy(update={"revision": 1})) == canonical_json(replayed), f"order {seed}"


def test_rows_of_another_job_state_no_rank(tmp_path: Path) -> None:
    bundle = copy_bundle(tmp_path)
    (bundle / "scheduler/node-a01").mkdir(parents=True)
    (bundle / TABLE).write_text(table_text([(p, 3301, s, lo, g) for p, _j, s, lo, g in STEP0]))
    conn = BundleConnector(bundle)
    assert conn.workload.task_pids == []
    assert "job-3302 (job 3302): 0 task pids; left out: 8 of other jobs" in conn.coverage()[-1].detail
    assert verdict(bundle).culprits.ranks == []


def test_gzip_and_24_11_and_json_tables_give_the_same_rank(tmp_path: Path) -> None:
    forms = {
        "scontrol-listpids.txt.gz": gzip.compress(table_text(STEP0).encode()),
        "listpids-24.11.txt": table_text(STEP0, row_24_11).encode(),
        "listpids.json": json.dumps({"pids": [
            {"pid": p, "job_id": j, "step_id": s, "local_task_id": {"set": True, "infinite": False, "number": lo},
             "global_task_id": {"set": True, "infinite": False, "number": g}} for p, j, s, lo, g in STEP0]}).encode(),
    }
    for i, (name, data) in enumerate(forms.items()):
        bundle = copy_bundle(tmp_path, name=f"b{i}")
        (bundle / "scheduler/node-a01").mkdir(parents=True)
        (bundle / "scheduler/node-a01" / name).write_bytes(data)
        assert verdict(bundle).culprits.ranks == [3], name


def test_conflicting_statements_are_dropped(tmp_path: Path) -> None:
    # the table says pid 647 is rank 3, workload.yaml ranks.5.pid says it is rank 5
    bundle = copy_bundle(tmp_path)
    (bundle / "scheduler/node-a01").mkdir(parents=True)
    (bundle / TABLE).write_text(table_text(STEP0))
    spec = yaml.safe_load((bundle / "workload.yaml").read_text())
    spec.pop("ranks_per_node")
    spec["ranks"] = {r: {"host": "node-a01", "gpu": r} for r in range(8)}
    spec["ranks"][5]["pid"] = 647
    (bundle / "workload.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    conn = BundleConnector(bundle)
    alloc = Allocation.from_workload(conn.workload)
    assert (("node-a01", 647) not in pid_map(alloc, [])) and pid_map(alloc, [])[("node-a01", 648)] == 4
    decided = verdict(bundle)
    assert decided.culprits.ranks == []
    # the verdict says why it names no rank
    [said] = [line for line in decided.reasoning if line.startswith("pid 647 on node-a01")]
    assert said.startswith("pid 647 on node-a01 is stated as rank 3 (scheduler/node-a01/scontrol-listpids.txt:")
    assert said.endswith("and rank 5 (workload.yaml): no rank taken from it")
    # two snapshots of two steps in which pid 647 was different tasks: dropped too
    bundle2 = copy_bundle(tmp_path, name="b2")
    (bundle2 / "scheduler/node-a01").mkdir(parents=True)
    (bundle2 / TABLE).write_text(table_text(STEP0) + "\n" + table_text([(647, 3302, "1", 6, 6)]))
    alloc = Allocation.from_workload(BundleConnector(bundle2).workload)
    assert ("node-a01", 647) not in pid_map(alloc, [])
    assert verdict(bundle2).culprits.ranks == []


def test_a_step_whose_task_ids_are_not_the_ranks_states_none(tmp_path: Path) -> None:
    """srun started one torchrun per node: its task id is the node's index and the allocation
    places that rank on another host, so the step is not a rank statement."""
    spec = WorkloadSpec.model_validate({
        "workload_id": "job-3302", "state": "FAILED", "start": "2026-11-30T01:20:58Z",
        "nodes": ["node-a01", "node-a02"], "ranks_per_node": 8,
        "task_pids": [{"host": "node-a01", "pid": 700, "rank": 0, "step": "0"},
                      {"host": "node-a02", "pid": 800, "rank": 1, "step": "0"},
                      {"host": "node-a02", "pid": 801, "rank": 9, "step": "1"}]})
    alloc = Allocation.from_workload(spec)
    assert task_statements(alloc) == [("node-a02", 801, 9, "workload.yaml")]
    # without a rank layout the records are taken as stated
    bare = Allocation.from_workload(spec.model_copy(update={"ranks_per_node": None}))
    assert [s[:3] for s in task_statements(bare)] == [("node-a01", 700, 0), ("node-a02", 800, 1), ("node-a02", 801, 9)]


def _event(host: str, type_: str, n: int, rank=None, **attrs) -> Event:
    return Event(
        type=type_, at=1_796_001_664_000_000_000 + n, host=host, cluster="c1", workload_id="job-3302",
        rank=rank, attributes=attrs, rule="test.rule",
        evidence=[EvidenceRef(observation_id=f"obs-{n}", position=Position(file=f"logs/{host}/x.log", line=n))],
    ).with_id()


def test_shuffled_events_give_the_same_map() -> None:
    spec = WorkloadSpec.model_validate({
        "workload_id": "job-3302", "state": "FAILED", "start": "2026-11-30T01:20:58Z",
        "nodes": ["node-a01", "node-a02"], "ranks_per_node": 8,
        "task_pids": [{"host": "node-a01", "pid": 640 + r, "rank": r, "step": "0"} for r in range(8)]
        + [{"host": "node-a02", "pid": 900 + r, "rank": 8 + r, "step": "0"} for r in range(8)]})
    alloc = Allocation.from_workload(spec)
    events = [
        _event("node-a02", "torchrun.child_failed", 1, rank=12, pid=904),           # agrees with the table
        _event("node-a02", "torchrun.child_failed", 2, rank=13, pid=906),           # table says 14: dropped
        _event("node-a01", "nccl.warn", 3, rank=2, nccl_pid=777),                   # only the logs state 777
        _event("node-a01", "gpu.xid", 4, pid=647),                                  # lands on rank 7
        _event("node-a02", "host.oom_kill", 5, pid=906),                            # conflicting: no rank
        _event("node-a01", "host.oom_kill", 6, pid=777),
    ]
    want = {("node-a01", 640 + r): r for r in range(8)} | {("node-a02", 900 + r): 8 + r for r in range(8) if r != 6}
    want[("node-a01", 777)] = 2
    for perm in itertools.islice(itertools.permutations(events), 0, None, 37):
        assert pid_map(alloc, perm) == want
        shuffled = dict(random.Random(len(perm)).sample([(e.event_id, e) for e in perm], len(perm)))
        ranked = assign_ranks(alloc, shuffled)
        assert ranked[events[3].event_id].rank == 7
        assert ranked[events[4].event_id].rank is None
        assert ranked[events[5].event_id].rank == 2
        assert ranked[events[3].event_id].event_id == events[3].event_id


def test_hostile_and_odd_scheduler_files(tmp_path: Path, monkeypatch) -> None:
    bundle = copy_bundle(tmp_path)
    sched = bundle / "scheduler"
    (sched / "node-a01").mkdir(parents=True)
    (sched / "node-a09").mkdir()
    (sched / "loose.txt").write_text(table_text(STEP0))                               # not in a host dir
    (sched / "node-a01" / "notes.txt").write_text("collected by the prolog\n")          # no listpids
    (sched / "node-a01" / "empty.txt").write_text("\n")
    (sched / "node-a01" / "binary.bin").write_bytes(bytes(range(256)) * 4)
    (sched / "node-a01" / "big.txt").write_text(table_text(STEP0) * 3)                 # over the cap
    outside = tmp_path / "outside.txt"
    outside.write_text(table_text(STEP0))
    (sched / "node-a01" / "link.txt").symlink_to(outside)
    (sched / "node-a01" / "dangling.txt").symlink_to(tmp_path / "nowhere")
    (sched / "node-a09" / "scontrol-listpids.txt").write_text(table_text(STEP0))       # not a node of the job
    import connectors.bundle as bundle_mod
    monkeypatch.setattr(bundle_mod, "MAX_STEP_RECORD_BYTES", 600)
    conn = BundleConnector(bundle)
    assert conn.workload.task_pids == []
    list(conn.observations())
    cov = {c.source.removeprefix("file:scheduler/"): c for c in conn.coverage() if c.source.startswith("file:scheduler/")}
    assert cov["loose.txt"].status == "failed" and "scheduler/<host>/<file>" in cov["loose.txt"].detail
    assert cov["node-a01/notes.txt"].status == "failed" and "header" in cov["node-a01/notes.txt"].detail
    assert cov["node-a01/empty.txt"].status == "empty"
    assert cov["node-a01/binary.bin"].status == "failed"
    assert cov["node-a01/big.txt"].status == "failed" and "over 600 bytes" in cov["node-a01/big.txt"].detail
    assert cov["node-a01/link.txt"].status == "failed" and "outside the bundle" in cov["node-a01/link.txt"].detail
    assert cov["node-a01/dangling.txt"].status == "failed"
    assert cov["node-a09/scontrol-listpids.txt"].status == "present"
    assert "node-a09 is no node of the bundle's workloads" in cov["node-a09/scontrol-listpids.txt"].detail
    assert verdict(bundle).culprits.ranks == []


def test_a_workload_id_that_names_no_job_uses_no_rows(tmp_path: Path) -> None:
    bundle = copy_bundle(tmp_path)
    (bundle / "scheduler/node-a01").mkdir(parents=True)
    (bundle / TABLE).write_text(table_text(STEP0))
    text = (bundle / "workload.yaml").read_text().replace("workload_id: job-3302", "workload_id: '3302_4'")
    (bundle / "workload.yaml").write_text(text)
    conn = BundleConnector(bundle)
    assert conn.workload.task_pids == []
    assert "names no Slurm job id" in conn.coverage()[-1].detail


def test_each_workload_of_a_bundle_takes_its_own_job(tmp_path: Path) -> None:
    bundle = copy_bundle(tmp_path)
    (bundle / "workloads").mkdir()
    other = (bundle / "workload.yaml").read_text().replace("job-3302", "job-3290").replace(
        "'2026-11-30T01:20:58Z'", "'2026-11-30T00:10:00Z'").replace("'2026-11-30T01:21:06Z'", "'2026-11-30T00:40:00Z'")
    (bundle / "workloads" / "job-3290.yaml").write_text(other)
    (bundle / "scheduler/node-a01").mkdir(parents=True)
    (bundle / TABLE).write_text(table_text(STEP0 + [(500, 3290, "0", 0, 0), (501, 3290, "0", 1, 1)]))
    conn = BundleConnector(bundle)
    by_id = {w.workload_id: [(t.pid, t.rank) for t in w.task_pids] for w in conn.workloads}
    assert by_id == {"job-3302": [(644 + i, i) for i in range(8)], "job-3290": [(500, 0), (501, 1)]}
    assert verdict(bundle).culprits.ranks == [3]
