"""The edge prefilter of ``faultstream connect files`` (connectors/prefilter.py): the records it
keeps give the same events (same ids) as all records, tracebacks and NCCL blocks stay whole,
noisy training logs shrink by far, and on a real broker a prefiltered run publishes fewer
observations while its coverage records and the verdict equal an unfiltered run's."""

from __future__ import annotations

import pytest
import os
import re
import shutil
import time
from pathlib import Path

from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from typer.testing import CliRunner

from connectors.bundle import BundleConnector
from connectors.cursor import CursorStore
from connectors.files import FilesConnector
from connectors.prefilter import EdgePrefilter
from connectors.publish import workload_observation
from correlators.config import EngineConfig
from correlators.rules import load_rule_pack
from correlators.unrecognised import EVENT_TYPE as UNRECOGNISED
from schemas.records import Observation, Position, Source
from streams.replay import replay_bundle, replay_observations
from tests.connectors.test_files_connector import consume, values
from tests.kafka_fixtures import kafka_bootstrap, kafka_config, kafka_topic_factory  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "incidents"
PACK = load_rule_pack()
#: the prefilter of the packaged rule pack
keep = EdgePrefilter(PACK).keep


def example_log_files() -> list[Path]:
    files = sorted(p for p in EXAMPLES.glob("*/logs/**/*") if p.is_file())
    assert len(files) > 100, "the example bundles' log files are missing"
    return files


def read_all(paths: list[Path], cursor: Path, **kw) -> tuple[FilesConnector, list[Observation]]:
    conn = FilesConnector(paths, host="node-a01", cluster="c1", cursor=CursorStore(cursor), year=2026, **kw)
    out = list(conn.observations())
    conn.close()
    return conn, out


def events(observations: list[Observation]) -> list:
    return [e for o in observations if o.kind == "log_line" for e in PACK.extract(o)]


# -- (a) the kept records give the events of all records ------------------------------------


@pytest.mark.slow
def test_kept_records_give_the_same_events_on_every_example_log(tmp_path: Path) -> None:
    dropped = kept_multiline = 0
    all_events = unrecognised = 0
    for i, path in enumerate(example_log_files()):
        full, every = read_all([path], tmp_path / f"all{i}.json")
        edge, kept = read_all([path], tmp_path / f"kept{i}.json", prefilter=True, publish_coverage=False)
        # the kept records are exactly the records keep() accepts, with the same ids (positions,
        # times and bodies as in the unfiltered run), in file order
        assert [o.observation_id for o in kept] == [o.observation_id for o in every if keep(o.body)], path
        want, got = events(every), events(kept)
        assert [e.event_id for e in got] == [e.event_id for e in want], path
        assert [e.event_id for e in got if e.type == UNRECOGNISED] == \
               [e.event_id for e in want if e.type == UNRECOGNISED], path
        # a dropped record yields nothing: not an event, not an unrecognised-error event
        assert all(not PACK.extract(o) for o in every if not keep(o.body)), path
        # counted: the coverage reports the records read, kept or not
        (a,), (b,) = full.coverage(), edge.coverage()
        assert (b.records, b.unparsed, b.status) == (a.records, a.unparsed, a.status), path
        assert edge.dropped == len(every) - len(kept) and edge.totals().records_read == full.records
        dropped += edge.dropped
        kept_multiline += sum("\n" in o.body for o in kept)
        all_events += len(want)
        unrecognised += sum(e.type == UNRECOGNISED for e in want)
    assert dropped > 1000, dropped  # the examples do hold lines no rule can match
    assert all_events > 1000 and unrecognised >= 4, (all_events, unrecognised)
    assert kept_multiline >= 10, kept_multiline  # tracebacks / NCCL blocks kept whole


def test_multiline_records_are_kept_whole(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(
        "2026-11-30T01:20:00.000Z step 1 loss 2.1\n"
        "[rank3]: Traceback (most recent call last):\n"
        '[rank3]:   File "train.py", line 9, in <module>\n'
        "[rank3]:     loss.backward()\n"
        "[rank3]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error\n"
        "[rank3]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.\n"
        "[rank3]: Last error:\n"
        "[rank3]: socketStartConnect: Connect to 10.0.0.12<41865> failed : Software caused connection abort\n"
        "2026-11-30T01:20:02.000Z step 2 loss 2.0\n")
    _, every = read_all([log], tmp_path / "a.json")
    _, kept = read_all([log], tmp_path / "b.json", prefilter=True)
    logs = [o for o in kept if o.kind == "log_line"]
    assert len(every) == 3 and [o.position.line for o in logs] == [2]  # the record, from its first line
    assert logs[0].body.count("\n") == 6 and logs[0].observation_id == every[1].observation_id
    assert [e.event_id for e in events(logs)] == [e.event_id for e in events(every)] != []
    # the line of the traceback's frames alone could match nothing: a line-wise filter would cut it
    assert not keep('[rank3]:   File "train.py", line 9, in <module>')


KEYWORD_PIECES = sorted(PACK.prefilter_keywords) + ["step 12 loss 2.3", " ", "\n", "[rank1]: ", "NCCL INFO",
                                                    "2026-11-30T01:20:00Z ", "Xid", "ECC", "ror"]


@hsettings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(KEYWORD_PIECES) | st.text(max_size=12), max_size=8))
def test_a_dropped_record_never_yields_an_event(parts: list[str]) -> None:
    body = "".join(parts)
    if not body.strip():
        return
    obs = Observation(source=Source(connector="files", instance="node-a01"), kind="log_line",
                      observed_at=1_796_001_600_000_000_000, time_source="line", time_quality=1.0, host="node-a01", cluster="c1", body=body,
                      position=Position(file="/var/log/x.log", line=1)).with_id()
    if not keep(body):
        assert PACK.extract(obs) == []
    assert keep(body) == EdgePrefilter(PACK).keep(body) == PACK.may_extract(body)


# -- (b) the byte ratio on a noisy training log ---------------------------------------------


def noisy_log(path: Path, steps: int = 20_000) -> None:
    """bench/stream.py-like background: glog training-step lines and NCCL INFO lines, with one
    XID and one traceback in the middle."""
    with path.open("w") as fh:
        for i in range(steps):
            sec, us = divmod(i * 50_000, 1_000_000)
            ts = f"I1130 01:{20 + sec // 60:02d}:{sec % 60:02d}.{us:06d}"
            if i % 5 == 4:
                fh.write(f"node-a01:4001:4101 [1] NCCL INFO Channel {i % 32:02d}/0 : 9[1] -> 10[2] via P2P/CUMEM/read\n")
            else:
                fh.write(f"[rank{i % 8}]:[{ts} 4000 train.py:212] step {i} loss {2 + (i % 97) / 100:.4f} "
                         f"lr 3.0e-04 grad_norm {(i % 13) / 10:.3f} tokens/s {90000 + i % 9999}\n")
            if i == steps // 2:
                fh.write("Nov 30 01:28:20 node-a01 kernel: NVRM: Xid (PCI:0000:9c:00): 79, pid=4001, "
                         "GPU has fallen off the bus.\n")
                fh.write("2026-11-30T01:28:21.000Z ERROR dataloader worker 3 quit, restarting it\n")
                fh.write("[rank1]: Traceback (most recent call last):\n[rank1]:   File \"train.py\", line 3, in f\n"
                         "[rank1]: RuntimeError: CUDA error: unspecified launch failure\n")


@pytest.mark.slow
def test_byte_ratio_on_a_noisy_training_log(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    noisy_log(log)
    full, every = read_all([log], tmp_path / "a.json")
    edge, kept = read_all([log], tmp_path / "b.json", prefilter=True, publish_coverage=False)
    t = edge.totals()
    assert t.bytes_read == log.stat().st_size  # every byte of the file is accounted for
    assert t.records_read == full.records == 20_003 and t.records_published == len(kept) == 3
    assert t.saved > 0.999, t
    assert [e.event_id for e in events(kept)] == [e.event_id for e in events(every)]
    assert {e.type for e in events(kept)} >= {"gpu.xid", UNRECOGNISED}
    assert re.search(r"read 2\.\d MB in 20003 records, published \d+ B in 3 records \(99\.9\d% of bytes saved, "
                     r"20000 records dropped at the edge\)", t.summary()), t.summary()


def test_coverage_totals_survive_a_restart(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    noisy_log(log, steps=100)
    cursor = CursorStore(tmp_path / "c.json")
    first = FilesConnector([log], host="node-a01", cursor=cursor, prefilter=True)
    batch = first.poll()
    cursor.save(first.checkpoint())
    (cov,) = [o for o in batch if o.kind == "health_event"]
    assert cov.format == "coverage" and cov.attributes["coverage"]["records"] == 103
    assert cov.attributes["edge"]["records_dropped"] == 100 and cov.attributes["edge"]["prefilter"] is True
    with log.open("a") as fh:
        fh.write("[rank0]:[I1130 01:30:00.000000 4000 train.py:212] step 101 loss 2.0\n")
    again = FilesConnector([log], host="node-a01", cursor=cursor, prefilter=True)
    (cov2,) = [o for o in again.poll() if o.kind == "health_event"]
    assert again.records == 1  # this run's count
    assert cov2.attributes["coverage"]["records"] == 104  # the source's count since the cursor began
    assert cov2.attributes["edge"]["records_dropped"] == 101
    # a failed delivery forgets the unconfirmed coverage record: the retry sends it again
    again.rewind()
    (cov3,) = [o for o in again.poll() if o.kind == "health_event"]
    assert cov3.observation_id == cov2.observation_id


# -- (c) on a real broker: fewer observations, the same coverage and verdict ----------------

BUNDLE = EXAMPLES / "multinode-stalled-rank-11"


def noisy_bundle_logs(dst: Path) -> list[Path]:
    """The bundle's logs with 300 training-step lines before each host's first line."""
    out = []
    for src in sorted(p for p in (BUNDLE / "logs").rglob("*") if p.is_file()):
        target = dst / src.relative_to(BUNDLE)
        target.parent.mkdir(parents=True, exist_ok=True)
        text = src.read_text()
        if src.parent.name.startswith("node-"):
            rank = 0 if src.parent.name == "node-a01" else 8
            noise = "".join(f"[rank{rank + i % 8}]:[I1130 02:{10 + i // 60:02d}:{i % 60:02d}.000000 4000 train.py:212] "
                            f"step {i} loss {2 + i / 1000:.4f} lr 3.0e-04\n" for i in range(300))
            text = noise + text
        target.write_text(text)
        out.append(target)
    return out


def run_cli(paths: list[Path], cursor: Path, bootstrap: str, topic: str, *flags: str):
    from streams.cli import app

    args = ["connect", "files", *map(str, paths), "--host-from-path", r"/logs/(?P<host>[^/]+)/",
            "--cluster", "c1", "--workload", "job-1010", "--cursor", str(cursor),
            "--bootstrap", bootstrap, "--topic", topic, *flags]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return result


def test_cli_prefilter_publishes_fewer_records_with_the_same_coverage_and_verdict(
        tmp_path, kafka_bootstrap, kafka_config, kafka_topic_factory):  # noqa: F811
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip() or kafka_bootstrap
    logs = noisy_bundle_logs(tmp_path / "b")
    shutil.copy(BUNDLE / "workload.yaml", tmp_path / "b" / "workload.yaml")
    topics = {"edge": kafka_topic_factory("edge"), "full": kafka_topic_factory("full")}
    edge = run_cli(logs, tmp_path / "edge.json", bootstrap, topics["edge"], "--prefilter")
    full = run_cli(logs, tmp_path / "full.json", bootstrap, topics["full"], "--no-prefilter", "--coverage")
    m = re.search(r"published (\d+) records \((\d+) log records, 3 coverage records\)", edge.output)
    assert m, edge.output
    m_full = re.search(r"published (\d+) records \((\d+) log records, 3 coverage records\)", full.output)
    assert m_full, full.output
    n_edge, n_full = int(m[1]), int(m_full[1])
    assert n_full - n_edge == 600, (n_edge, n_full)  # exactly the 600 step lines stay at the edge
    assert re.search(r"prefilter: read [\d.]+ kB in \d+ records, published [\d.]+ kB in \d+ records "
                     r"\(\d+\.\d\d% of bytes saved, (\d+) records dropped at the edge\)", edge.output), edge.output
    assert "prefilter:" not in full.output

    got = {k: [Observation.model_validate(v) for v in values(consume(kafka_config, t, n))]
           for (k, t), n in zip(topics.items(), (n_edge, n_full))}
    assert len(got["edge"]) == n_edge and len(got["full"]) == n_full
    cov = {k: {o.attributes["coverage"]["source"]: o.attributes for o in obs if o.format == "coverage"}
           for k, obs in got.items()}
    assert set(cov["edge"]) == set(cov["full"]) == {f"file:{p}" for p in logs}
    for source, attrs in cov["edge"].items():
        a, b = attrs["coverage"], cov["full"][source]["coverage"]
        assert (a["records"], a["unparsed"], a["status"]) == (b["records"], b["unparsed"], b["status"]), source
        e = attrs["edge"]
        assert e["records_read"] == a["records"] == e["records_published"] + e["records_dropped"]
        assert cov["full"][source]["edge"]["records_dropped"] == 0
    assert sum(a["edge"]["records_dropped"] for a in cov["edge"].values()) >= 600
    # the same log records, ids included, minus the dropped ones
    ids = {k: [o.observation_id for o in obs if o.kind == "log_line"] for k, obs in got.items()}
    assert set(ids["edge"]) < set(ids["full"])

    # a replay of what reached Kafka (behind the scheduler's workload record) decides alike
    spec = workload_observation(BundleConnector(tmp_path / "b"))
    config = EngineConfig.default()
    verdicts = {k: replay_observations([spec, *obs], config)[0] for k, obs in got.items()}
    (a,), (b,) = verdicts["edge"], verdicts["full"]
    assert a.scope.id == "job-1010"
    assert a.root_cause.code == b.root_cause.code == "nccl.stalled_rank", a.root_cause
    assert (a.culprits.hosts, a.culprits.ranks, a.quality) == (["node-a02"], [11], b.quality)
    strip = {"coverage"}
    assert a.model_dump(exclude=strip) == b.model_dump(exclude=strip)
    for x, y in zip(a.coverage, b.coverage, strict=True):
        assert (x.source, x.status, x.records, x.unparsed, x.events, x.unrecognised) == \
               (y.source, y.status, y.records, y.unparsed, y.events, y.unrecognised)
    assert any("records not published" in c.detail for c in a.coverage)


# -- flight-recorder dumps: the same record as the bundle reader's ----------------------------


def test_flight_recorder_dumps_stream_as_the_bundle_reads_them(tmp_path: Path) -> None:
    """A PyTorch flight-recorder dump (pickle, or the one-line JSON) tailed by ``connect files``
    becomes the one compact JSON record the bundle reader makes of it: the same ``proc.stack``
    event (rank, op, sequence number, state) for every rank."""
    for bundle, pattern in (("stacks-flight-recorder-pickle-rank3", "nccl_trace_rank_*"),
                            ("stacks-flight-recorder-json-rank3", "fr-rank*.json")):
        dumps = sorted((EXAMPLES / bundle / "logs").glob("*/" + pattern))
        assert len(dumps) == 8, (bundle, dumps)
        want = {e.rank: e for e in replay_bundle(EXAMPLES / bundle).events if e.type == "proc.stack"}
        got = {}
        for i, path in enumerate(dumps):
            conn, obs = read_all([path], tmp_path / f"{bundle}{i}.json")
            assert len(obs) == 1, (path, [o.body[:80] for o in obs])
            assert obs[0].body.startswith("{") and '"entries"' in obs[0].body, obs[0].body[:200]
            assert any("flight recorder" in (c.detail or "") for c in conn.coverage()), conn.coverage()
            (event,) = [e for e in PACK.extract(obs[0]) if e.type == "proc.stack"]
            got[event.rank] = event
        assert sorted(got) == list(range(8)), sorted(got)
        # the rank that never entered the collective the others wait in, as in the bundle
        states = {r: (e.attributes.get("op"), e.attributes.get("seq_num"), e.attributes.get("fr_state"))
                  for r, e in got.items()}
        assert states[3][1] == 1041 and all(states[r][1] == 1042 for r in got if r != 3), states
        assert {r: e.attributes for r, e in want.items()} == {r: e.attributes for r, e in got.items()}


@pytest.mark.slow
def test_a_dump_still_being_written_waits_for_its_writer(tmp_path: Path) -> None:
    """A pickle cut short while its writer is still at it is not published as an error: in
    follow mode it is read again once complete."""
    src = sorted((EXAMPLES / "stacks-flight-recorder-pickle-rank3" / "logs").glob("*/nccl_trace_rank_3"))[0]
    data = src.read_bytes()
    path = tmp_path / "nccl_trace_rank_3"
    path.write_bytes(data[: len(data) // 2])
    conn = FilesConnector([path], host="node-a01", cluster="c1", cursor=CursorStore(tmp_path / "c.json"),
                          year=2026, follow=True, idle_s=1.0)
    try:
        assert [o for o in conn.poll() if o.kind == "log_line"] == []
        path.write_bytes(data)
        got: list[Observation] = []
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            got = [o for o in conn.poll() if o.kind == "log_line"]
            time.sleep(0.2)
        (obs,) = got
        (event,) = [e for e in PACK.extract(obs) if e.type == "proc.stack"]
        assert event.rank == 3 and event.attributes.get("seq_num") == 1041, event
    finally:
        conn.close()
