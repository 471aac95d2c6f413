"""Stack dumps of hung ranks (issue 33): the parsers of correlators/stackdump.py (py-spy text and
JSON, faulthandler, gdb, the PyTorch flight recorder in JSON and pickle form), the record grouping
of connectors/records.py, the rule hook (one proc.stack per thread) and the stack_outlier
detector (the rank outside the common collective; all ranks in one frame; the counter-case)."""

from __future__ import annotations

import json
import pickle
import random
import re
import sys
from pathlib import Path

import pytest

from connectors.records import group_records, record_span
from correlators.attribution import WorkloadInfo, decide
from correlators.enrich import Allocation
from correlators.rules import load_rule_pack
from correlators.stackdump import (
    StackDumpError, classify, load_flight_recorder_pickle, normalise_dump_bytes, parse_faulthandler, parse_gdb,
    parse_flight_recorder, parse_pyspy_json, parse_pyspy_text, parse_record, rank_from_path,
)
from schemas.records import Observation, Position, Source, canonical_json

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import make_stack_incidents as mk  # noqa: E402

from tests.correlators.test_reasoning import T0, S, ev, spec  # noqa: E402


# ----------------------------------------------------------------------------- parsers


def test_pyspy_text_threads_frames_and_main():
    text = "\n".join(mk.pyspy_text(5, mk.DATASET_READ))
    threads = parse_pyspy_text(text)
    assert [t.thread_name for t in threads] == ["MainThread", "Thread-1", "Thread-2 (_pin_memory_loop)"]
    main = threads[0]
    assert main.main and main.thread == str(mk.pid_of(5))
    assert main.frames[0].function == "read_array" and main.frames[0].file == "numpy/lib/format.py"
    assert main.frames[0].line == 822 and main.frames[-1].function == "<module>"
    w = classify(main)
    assert (w.state, w.frame.function) == ("io", "read_array")
    assert classify(threads[2]).state == "infra"  # the pin-memory loop every rank has
    assert classify(threads[1]).state == "lock" and not threads[1].main


def test_pyspy_text_locals_and_no_line():
    text = ('Thread 0x7F3A2C1FF740 (active+gil): "MainThread"\n    compute (model.py:10)\n'
            "        Arguments:\n            x: <Tensor at 0x7f>\n    <module> (native)")
    (t,) = parse_pyspy_text(text)
    assert [f.function for f in t.frames] == ["compute", "<module>"] and t.frames[1].line == 0
    assert classify(t).state == "other"


def test_pyspy_json_whole_array_and_cut_object():
    text = mk.pyspy_json(2, mk.FILELOCK)
    threads = parse_pyspy_json(text)
    main = next(t for t in threads if t.main)
    assert main.thread_name == "MainThread" and main.pid == mk.pid_of(2)
    assert classify(main).state == "lock" and classify(main).frame.function == "_acquire"
    # one pretty-printed thread object cut in the middle of its frames: the innermost still read
    obj = json.dumps(json.loads(text)[-1], indent=2)
    cut = "\n".join(obj.split("\n")[:30])
    (t,) = parse_pyspy_json(cut)
    assert t.frames[0].function == "_acquire" and t.thread_name == "MainThread"


def test_faulthandler_prefixed_and_current_thread():
    text = "\n".join(mk.faulthandler_dump(5, mk.WORKER_WAIT))
    threads = parse_faulthandler(text)
    assert {t.rank for t in threads} == {5}
    main = next(t for t in threads if t.main)  # outermost frame <module>
    assert classify(main).state == "dataloader"
    assert main.frames[0].function == "wait" and main.frames[0].file.endswith("threading.py")
    (cur,) = parse_faulthandler('Current thread 0x00007f0e3b5ff740 [python3] (most recent call first):\n'
                                '  File "/w/train.py", line 88 in step\n  <no Python frame>')
    assert cur.main and cur.thread_name == "python3" and [f.line for f in cur.frames] == [88]


def test_gdb_threads_functions_and_infra():
    text = "\n".join(mk.gdb_dump(6, reading=True))
    threads = parse_gdb(text)
    assert [t.thread_name for t in threads] == ["pt_nccl_heartbt", "pt_nccl_watchdg", "python3"]
    assert [classify(t).state for t in threads] == ["infra", "infra", "io"]
    assert threads[2].main and threads[2].frames[0].function == "__GI___libc_read"
    other = parse_gdb("\n".join(mk.gdb_dump(0, reading=False)))[2]
    w = classify(other)
    assert (w.state, w.op) == ("collective", "barrier")
    assert w.frame.function.startswith("c10d::ProcessGroupNCCL::WorkNCCL::synchronizeInternal(")


def test_flight_recorder_json_and_pickle():
    dump = mk.fr_dump(1, 3, True)
    blob = pickle.dumps(dump, protocol=2)
    assert load_flight_recorder_pickle(blob)["version"] == "2.7"
    line, note = normalise_dump_bytes(blob, "logs/node-a01/nccl_trace_rank_1")
    assert "pickle" in note and line.count(b"\n") == 1
    (t,) = parse_flight_recorder(line.decode())
    assert t.rank == 1 and t.collective["seq"] == 1042 and t.collective["state"] == "started"
    assert classify(t).state == "collective" and classify(t).op == "all_reduce"
    assert t.frames[0].function == "all_reduce"
    (t3,) = parse_record(json.dumps(mk.fr_dump(3, 3, False)))
    assert classify(t3).state == "other" and t3.collective["last_seq"] == 1041


class _Evil:
    def __reduce__(self):
        return (print, ("owned",))


def test_restricted_unpickler_refuses_classes_and_garbage():
    evil = pickle.dumps({"entries": [_Evil()]}, protocol=2)
    with pytest.raises(StackDumpError, match="only plain data"):
        load_flight_recorder_pickle(evil)
    line, note = normalise_dump_bytes(evil, "nccl_trace_rank_4")
    assert "not read" in note and b"flight_recorder_error" in line
    with pytest.raises(StackDumpError):
        parse_record(line.decode())
    with pytest.raises(StackDumpError):
        load_flight_recorder_pickle(b"\x80\x02}q\x00(X\x07\x00\x00\x00entries")  # truncated
    assert normalise_dump_bytes(b"\x80\x04\x95garbage", "x") is None
    # a memo-shared list copied out many times: refused, not expanded without bound
    big = list(range(1000))
    bomb = pickle.dumps({"entries": [], "pg_config": [[big] * 1000] * 10}, protocol=2)
    line, note = normalise_dump_bytes(bomb, "nccl_trace_rank_0")
    assert "not read" in note


@pytest.mark.parametrize("text", [
    "", "Thread 12 (idle)", "Thread 0x7f is not a dump (most recent call first):",
    '[{"owns_gil": true, "frames": [', "{not json", '{"entries": 5, "pg_config": {}}',
    "Thread 1 (Thread 0x7f (LWP 9)):\n#0 garbage", "\x00\x01\x02",
])
def test_malformed_dumps_give_an_error_or_nothing(text):
    try:
        threads = parse_record(text)
    except StackDumpError as exc:
        assert str(exc)
        return
    for t in threads:
        classify(t)


def test_rank_from_path():
    assert rank_from_path("logs/node-a02/stacks-rank5.txt") == 5
    assert rank_from_path("logs/node-a01/nccl_trace_rank_12") == 12
    assert rank_from_path("logs/node-a01/rank3/pyspy.txt") == 3
    assert rank_from_path("logs/node-a01/torchrun.log") is None
    assert rank_from_path("logs/node-a01/franken.log") is None


# ----------------------------------------------------------------------------- records + rule


def _groups(lines):
    recs = list(group_records(lines))
    for rec in recs:
        s = rec.first_line - 1
        e = s + rec.text.count("\n") + 1
        for i in range(s, e):
            assert record_span(lines, i) == (s, e)
    return recs


@pytest.mark.parametrize("lines", [
    mk.pyspy_text(5, mk.DATASET_READ), mk.faulthandler_dump(5, mk.WORKER_WAIT),
    mk.gdb_dump(6, True), mk.pyspy_json(2, mk.FILELOCK).split("\n"),
])
def test_one_record_per_thread_and_span_agrees(lines):
    recs = _groups(lines)
    heads = [r for r in recs if re.match(r"(?:\[rank\d+\]:)?Thread |  \{", r.text) and "\n" in r.text]
    assert len(heads) == 3


def _obs(text, file="logs/node-a02/stacks-rank5.txt", line=1):
    return Observation(source=Source(connector="test", instance="stack"), kind="log_line", observed_at=T0,
                       time_source="transport", time_quality=0.2, host="node-a02", cluster="c1",
                       workload_id="job-1001", body=text, position=Position(file=file, line=line)).with_id()


def test_hook_events_rank_from_file_prefix_and_dump():
    pack = load_rule_pack()
    lines = mk.pyspy_text(5, mk.DATASET_READ)
    evs = [e for rec in group_records(lines) for e in pack.extract(_obs(rec.text))]
    assert [e.attributes["thread_name"] for e in evs] == ["MainThread", "Thread-1"]  # pin-memory: infra
    assert {e.rank for e in evs} == {5} and evs[0].attributes["state"] == "io"
    assert evs[0].attributes["frames"][0] == "read_array (format.py:822)"
    fh = mk.faulthandler_dump(2, mk.ALLREDUCE)
    evs = [e for rec in group_records(fh) for e in pack.extract(_obs(rec.text, file="logs/node-a01/torchrun.log"))]
    assert {e.rank for e in evs} == {2} and any(e.attributes.get("op") == "all_reduce" for e in evs)
    line, _ = normalise_dump_bytes(pickle.dumps(mk.fr_dump(6, 3, True), protocol=2), "x")
    (e,) = pack.extract(_obs(line.decode(), file="logs/node-a02/nccl_trace_rank_6"))
    assert e.rank == 6 and e.attributes["seq_num"] == 1042 and e.attributes["fr_state"] == "started"


# ----------------------------------------------------------------------------- detector


def stack(rank, state, host=None, main=True, op=None, frame="f (x.py:1)", sig=None, **more):
    host = host or ("node-a01" if rank < 8 else "node-a02")
    a = dict(format="py-spy", state=state, main=main, frame=frame, function=frame.split(" ")[0],
             signature=sig or (f"collective:{op}" if state == "collective" else f"{state}:{frame}"),
             frames=[frame], **more)
    if op:
        a["op"] = op
    return ev("proc.stack", 3000 + rank * 0.01, host, rank=rank, **a)


def decide_orders(events, s=None):
    s = s or spec()
    outs = []
    for seed in (0, 3, 11):
        evs = list(events)
        random.Random(seed).shuffle(evs)
        alloc = Allocation.from_workload(s)
        att = decide(WorkloadInfo.from_spec(s), alloc, [alloc.enrich(e) for e in evs], [], ruleset_version="t")
        outs.append(canonical_json(att.model_dump(mode="json")))
    assert len(set(outs)) == 1
    return att


def test_the_rank_outside_the_collective_is_the_cause():
    events = [stack(r, "collective", op="all_reduce") for r in range(16) if r != 13]
    events.append(stack(13, "io", frame="read_array (format.py:822)"))
    # background threads of every rank are no evidence
    events += [stack(r, "lock", main=False, frame="wait (threading.py:324)") for r in range(16)]
    att = decide_orders(events)
    assert att.root_cause.code == "dist.stalled_rank.stack.io" and att.domain == "storage"
    assert att.culprits.ranks == [13] and att.culprits.hosts == ["node-a02"]
    assert "read_array" in att.root_cause.text
    assert any("wait in all_reduce" in r for r in att.reasoning)


def test_a_rank_in_another_collective_is_out_too():
    events = [stack(r, "collective", op="all_reduce") for r in range(16) if r != 4]
    events.append(stack(4, "collective", op="barrier"))
    att = decide_orders(events)
    assert att.root_cause.code == "dist.stalled_rank.stack.collective_mismatch" and att.culprits.ranks == [4]


def test_all_ranks_in_the_same_collective_name_nobody():
    att = decide_orders([stack(r, "collective", op="all_reduce") for r in range(16)])
    assert att.root_cause.code == "unknown" and att.culprits.ranks == [] and att.quality == "insufficient"


def test_too_many_outliers_name_nobody():
    events = [stack(r, "collective", op="all_reduce") for r in range(10)]
    events += [stack(r, "dataloader") for r in range(10, 16)]
    att = decide_orders(events)
    assert not att.root_cause.code.startswith("dist.")


def test_all_ranks_in_one_storage_read_is_shared_no_rank():
    events = [stack(r, "io", frame="load_tensor (serialization.py:1656)") for r in range(16)]
    att = decide_orders(events)
    assert att.root_cause.code == "dist.shared_stall.stack.io" and att.domain == "storage"
    assert att.culprits.ranks == []


def test_stack_cause_is_dated_at_the_stall_start_and_explains_the_timeouts():
    from tests.correlators.test_reasoning import watchdog
    events = [stack(r, "collective", op="all_reduce") for r in range(16) if r != 13]
    events.append(stack(13, "lock", frame="_acquire (_api.py:332)"))
    events += [watchdog(2900, "node-a01" if r < 8 else "node-a02", r) for r in range(16) if r != 13]
    att = decide_orders(events)
    assert att.root_cause.code == "dist.stalled_rank.stack.lock" and att.culprits.ranks == [13]
    assert att.quality in ("probable", "definitive")
    kinds = {a.code for a in att.alternatives}
    assert "nccl.stalled_rank" in kinds  # the silent-rank rule agrees, as an alternative
