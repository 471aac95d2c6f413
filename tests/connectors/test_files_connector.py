"""FilesConnector against a real Kafka broker: append, partial line, rotation, truncation,
restart from the cursor (exactly once), crash before the cursor is saved (same ids, nothing
lost), follow mode with a multi-line record, invalid UTF-8 and a 5 MB line, a last line
without a newline (published when its file is idle, else kept for the next run, never in
silence)."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from connectors.bundle import MAX_BODY_CHARS
from connectors.cursor import CursorStore
from connectors.files import FilesConnector
from connectors.runner import publish, run
from transport.kafka import RecordProducer
from transport.kafka_settings import KafkaSettings
from tests.kafka_fixtures import kafka_bootstrap, kafka_config, kafka_topic_factory  # noqa: F401


def consume(config: dict, topic: str, expect: int, timeout_s: float = 30.0, settle_s: float = 0.5) -> list:
    """Every message of ``topic`` from the start: waits until at least ``expect`` arrived, then
    ``settle_s`` more seconds for unexpected extras. Returns confluent_kafka Messages."""
    c = Consumer(dict(config, **{"group.id": f"test-{uuid.uuid4().hex}", "auto.offset.reset": "earliest",
                                  "enable.auto.commit": False}))
    c.subscribe([topic])
    out, deadline, settle_until = [], time.monotonic() + timeout_s, None
    try:
        while time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is not None:
                assert msg.error() is None, msg.error()
                out.append(msg)
            if len(out) >= expect:
                settle_until = settle_until or time.monotonic() + settle_s
                if time.monotonic() >= settle_until:
                    break
    finally:
        c.close()
    return out


def values(msgs) -> list[dict]:
    return [json.loads(m.value()) for m in msgs]


def ts(sec: int) -> str:
    return f"2026-11-30T01:20:{sec:02d}.000Z"


@pytest.fixture
def settings(kafka_bootstrap: str) -> KafkaSettings:  # noqa: F811
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip():
        return KafkaSettings()
    return KafkaSettings(bootstrap_servers=kafka_bootstrap)


def _run_once(path: Path, cursor: CursorStore, settings: KafkaSettings, topic: str) -> FilesConnector:
    conn = FilesConnector([path], host="node-a01", cluster="c1", cursor=cursor)
    with RecordProducer(settings, topic) as producer:
        run(conn, producer, cursor=cursor)
    conn.close()
    return conn


def test_append_partial_rotate_truncate_restart_exactly_once(tmp_path, settings, kafka_config, kafka_topic_factory):  # noqa: F811
    topic = kafka_topic_factory("files")
    log = tmp_path / "train.log"
    cursor = CursorStore(tmp_path / "cursor.json")
    expected: list[str] = []

    # 1. three lines and a partial one
    log.write_text(f"{ts(0)} a\n{ts(1)} b\n{ts(2)} c\n{ts(3)} par")
    expected += [f"{ts(0)} a", f"{ts(1)} b", f"{ts(2)} c"]
    conn = _run_once(log, cursor, settings, topic)
    assert conn.records == 3 and conn.lines_read == 3
    saved = cursor.load()["files"][str(log)]
    assert saved["offset"] == len(f"{ts(0)} a\n{ts(1)} b\n{ts(2)} c\n") and saved["line"] == 3

    # 2. restart from the cursor: the partial line is completed, one more line appended
    with log.open("a") as fh:
        fh.write(f"tial\n{ts(4)} d\n")
    expected += [f"{ts(3)} partial", f"{ts(4)} d"]
    conn = _run_once(log, cursor, settings, topic)
    assert conn.records == 2

    # 3. rotation while stopped: rename, the old file still gets a last line, a new file
    with log.open("a") as fh:
        fh.write(f"{ts(5)} e\n")
    log.rename(tmp_path / "train.log.1")
    with (tmp_path / "train.log.1").open("a") as fh:
        fh.write(f"{ts(6)} f-last-in-old")  # no newline: the old file is finished anyway
    log.write_text(f"{ts(7)} g-new\n{ts(8)} h-new\n")
    expected += [f"{ts(5)} e", f"{ts(6)} f-last-in-old", f"{ts(7)} g-new", f"{ts(8)} h-new"]
    conn = _run_once(log, cursor, settings, topic)
    assert conn.records == 4 and conn.rotations == 1

    # 4. rotation while running (between two polls of one connector) and truncation
    conn = FilesConnector([log], host="node-a01", cluster="c1", cursor=cursor)
    with RecordProducer(settings, topic) as producer:
        with log.open("a") as fh:
            fh.write(f"{ts(9)} i\n")
        publish(conn.poll(), producer, cursor=cursor, state=conn.checkpoint)
        os.replace(log, tmp_path / "train.log.2")
        log.write_text(f"{ts(10)} j-after-rotate\n{ts(11)} k\n")
        publish(conn.poll(), producer, cursor=cursor, state=conn.checkpoint)
        log.write_text(f"{ts(12)} l\n")  # truncated: shorter than the offset
        publish(conn.poll(), producer, cursor=cursor, state=conn.checkpoint)
    expected += [f"{ts(9)} i", f"{ts(10)} j-after-rotate", f"{ts(11)} k", f"{ts(12)} l"]
    assert conn.rotations == 1 and conn.truncations == 1
    detail = conn.coverage()[0].detail
    assert "truncated" in detail and "1 truncations" in detail
    conn.close()

    # 5. a restart with nothing new publishes nothing
    assert _run_once(log, cursor, settings, topic).records == 0

    msgs = consume(kafka_config, topic, len(expected))
    got = values(msgs)
    assert [o["body"] for o in got] == expected  # every record once, in file order
    assert len({o["observation_id"] for o in got}) == len(expected)
    assert {m.key() for m in msgs} == {b"node-a01"}
    assert all(dict(m.headers())["schema"] == b"Observation" for m in msgs)
    first = got[0]
    assert first["source"] == {"connector": "files", "instance": "node-a01"}
    assert first["position"]["file"] == str(log) and first["position"]["line"] == 1
    assert first["observed_at"] == 1796001600_000_000_000 and first["time_source"] == "line"
    # the new file after rotation restarts line numbers, in a new generation
    g = got[expected.index(f"{ts(7)} g-new")]
    assert g["position"]["line"] == 1 and g["attributes"]["file_epoch"] == 1
    last = got[-1]
    assert last["position"]["line"] == 1 and last["attributes"]["file_epoch"] == 3


def test_crash_before_cursor_saved_republishes_same_ids(tmp_path, settings, kafka_config, kafka_topic_factory):  # noqa: F811
    topic = kafka_topic_factory("crash")
    log = tmp_path / "a.log"
    cursor = CursorStore(tmp_path / "cursor.json")
    log.write_text(f"{ts(0)} one\n{ts(1)} two\n")
    _run_once(log, cursor, settings, topic)
    with log.open("a") as fh:
        fh.write(f"{ts(2)} three\nno time here\n{ts(3)} four\n")
    # "crash": the records are sent but the process dies before the cursor is saved
    crashed = FilesConnector([log], host="node-a01", cluster="c1", cursor=cursor)
    with RecordProducer(settings, topic) as producer:
        publish(crashed.poll(), producer)  # no cursor
    assert cursor.load()["files"][str(log)]["line"] == 2
    _run_once(log, cursor, settings, topic)  # restart: the unconfirmed tail again

    got = values(consume(kafka_config, topic, 2 + 3 + 3))
    bodies = [o["body"] for o in got]
    assert bodies == [f"{ts(0)} one", f"{ts(1)} two"] + [f"{ts(2)} three", "no time here", f"{ts(3)} four"] * 2
    ids = [o["observation_id"] for o in got]
    assert ids[2:5] == ids[5:8]  # duplicates collapse downstream: same deterministic ids
    untimed = got[3]
    assert untimed["time_source"] == "inferred" and untimed["time_quality"] == 0.5
    assert untimed["observed_at"] == got[2]["observed_at"]


def test_follow_mode_multiline_and_idle_emission(tmp_path, settings, kafka_config, kafka_topic_factory):  # noqa: F811
    topic = kafka_topic_factory("follow")
    cursor = CursorStore(tmp_path / "cursor.json")
    stop = threading.Event()
    result: dict = {}

    def worker():
        with RecordProducer(settings, topic) as producer:
            result["n"] = run(conn, producer, cursor=cursor, follow=True, poll_s=conn.poll_s, stop=stop)

    log = tmp_path / "node-b07-rank0.log"
    conn = FilesConnector([log], host_from_path=r"/(?P<host>node-\w+)-", cursor=cursor,
                          follow=True, poll_s=0.05, idle_s=0.3)
    t = threading.Thread(target=worker)
    t.start()
    try:
        time.sleep(0.2)  # the file does not exist yet
        with log.open("a") as fh:
            fh.write(f"{ts(0)} start\n[rank0]: Traceback (most recent call last):\n")
            fh.flush()
            time.sleep(0.1)
            fh.write('[rank0]:   File "train.py", line 3, in <module>\n[rank0]: RuntimeError: boom\n')
        # the traceback is the file's last record: emitted after the idle timeout
        got = values(consume(kafka_config, topic, 2, timeout_s=20))
    finally:
        stop.set()
        t.join(30)
    assert not t.is_alive()
    assert [o["body"] for o in got] == [
        f"{ts(0)} start",
        '[rank0]: Traceback (most recent call last):\n[rank0]:   File "train.py", line 3, in <module>\n'
        "[rank0]: RuntimeError: boom",
    ]
    assert got[1]["rank"] == 0 and got[1]["host"] == "node-b07" and got[1]["time_source"] == "inferred"
    assert result["n"] == 2
    assert cursor.load()["files"][str(log)]["offset"] == log.stat().st_size


def test_invalid_utf8_and_5mb_line(tmp_path, settings, kafka_config, kafka_topic_factory):  # noqa: F811
    topic = kafka_topic_factory("bad")
    log = tmp_path / "bad.log"
    cursor = CursorStore(tmp_path / "cursor.json")
    huge = b"X" * 5_000_000
    log.write_bytes(
        f"{ts(0)} ok\n".encode() + b"\xff\xfe broken \xc3\n" + huge + b"\n" + b"nul\x00byte\n" + f"{ts(1)} after\n".encode()
    )
    conn = _run_once(log, cursor, settings, topic)
    assert conn.bad_utf8_lines == 1 and conn.records == 5
    assert "invalid UTF-8 in 1 lines" in conn.coverage()[0].detail
    got = values(consume(kafka_config, topic, 5))
    assert [o["position"]["line"] for o in got] == [1, 2, 3, 4, 5]
    assert got[1]["body"] == "\ufffd\ufffd broken \ufffd"
    assert got[2]["attributes"]["truncated"] == 5_000_000
    assert got[2]["body"].startswith("X" * MAX_BODY_CHARS + "\n[faultstream: cut, ")
    assert got[3]["body"] == "nul\u2400byte"
    assert got[4]["body"] == f"{ts(1)} after"
    assert cursor.load()["files"][str(log)]["offset"] == log.stat().st_size


def test_pass_limit_gives_the_same_records(tmp_path, monkeypatch):
    """Reading in many small passes (bounded memory) yields exactly the records of one pass,
    tracebacks straddling a pass boundary included."""
    import connectors.files as files

    log = tmp_path / "x.log"
    parts = []
    for i in range(300):
        parts.append(f"{ts(i % 60)} line {i}\n")
        if i % 37 == 0:
            parts.append('Traceback (most recent call last):\n  File "t.py", line 1, in f\nValueError: v\n')
    log.write_text("".join(parts))
    one = list(FilesConnector([log], host="h", cursor=CursorStore(tmp_path / "c1.json")).observations())
    monkeypatch.setattr(files, "MAX_PASS_BYTES", 200)
    monkeypatch.setattr(files, "READ_CHUNK_BYTES", 64)
    small = FilesConnector([log], host="h", cursor=CursorStore(tmp_path / "c2.json"))
    many = list(small.observations())
    assert [o.observation_id for o in many] == [o.observation_id for o in one]
    assert len(one) == 300 + 9 and sum(o.body.startswith("Traceback") for o in one) == 9
    assert small.checkpoint()["files"][str(log)]["offset"] == log.stat().st_size


def test_cli_connect_files_resumes(tmp_path, settings, kafka_config, kafka_topic_factory):  # noqa: F811
    from typer.testing import CliRunner

    from connectors.registry import connectors
    from streams.cli import app

    assert {"bundle", "files"} <= set(connectors())
    topic = kafka_topic_factory("cli")
    log = tmp_path / "node-c03" / "syslog"
    log.parent.mkdir()
    log.write_text("Nov 30 01:20:00 node-c03 kernel: NVRM: Xid (PCI:0000:9c:00): 79, GPU has fallen off the bus.\n")
    args = ["connect", "files", str(log), "--host-from-path", r"/(?P<host>node-[a-z0-9]+)/",
            "--cluster", "c9", "--workload", "job-3", "--cursor", str(tmp_path / "cur.json"),
            "--bootstrap", settings.bootstrap_servers, "--topic", topic]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "published 1 records" in first.output
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and "published 0 records" in again.output
    (o,) = values(consume(kafka_config, topic, 1))
    assert (o["host"], o["cluster"], o["workload_id"], o["format"]) == ("node-c03", "c9", "job-3", "syslog")
    from connectors.timefmt import wall_to_ns

    # syslog has no year: the connector's year (default: the current UTC year)
    assert o["time_quality"] == 0.7 and o["observed_at"] == wall_to_ns(time.gmtime().tm_year, 11, 30, 1, 20, 0)
    bad = CliRunner().invoke(app, ["connect", "files", str(log), "--host-from-path", "(no-group)"])
    assert bad.exit_code == 2 and "no (?P<host>...) group" in bad.output


def test_a_binary_file_is_named_and_exits_2_after_the_others_are_published(tmp_path, settings, kafka_config,  # noqa: F811
                                                                           kafka_topic_factory):
    from typer.testing import CliRunner

    from streams.cli import app

    topic = kafka_topic_factory("cli-binary")
    good = tmp_path / "syslog"
    good.write_text("Nov 30 01:20:00 node-c03 kernel: NVRM: Xid (PCI:0000:9c:00): 79, GPU has fallen off the bus.\n")
    core = tmp_path / "core.dump"
    core.write_bytes(bytes(range(256)) * 16)
    result = CliRunner().invoke(app, ["connect", "files", str(good), str(core), "--host", "node-c03",
                                      "--cursor", str(tmp_path / "cur.json"),
                                      "--bootstrap", settings.bootstrap_servers, "--topic", topic])
    assert result.exit_code == 2, result.output
    assert "published 1 records from 2 files" in result.output
    assert f"{core}: not read: binary content (NUL/control bytes in the first" in result.output
    (o,) = values(consume(kafka_config, topic, 1))
    assert o["host"] == "node-c03" and "Xid" in o["body"]


def test_a_last_line_without_newline_is_never_dropped_without_a_word(tmp_path, settings, kafka_config,  # noqa: F811
                                                                    kafka_topic_factory):
    """A one-shot run publishes the last line of a file its writer is done with (not modified
    for ``idle_s``) even without a newline, says so on stderr with its offset, and marks the
    cursor: a newline appended later only ends that line. A file being written keeps its
    unterminated line for the next run and says so too."""
    from typer.testing import CliRunner

    from streams.cli import app

    topic = kafka_topic_factory("unterminated")
    log = tmp_path / "node-a01" / "kern.log"
    log.parent.mkdir()
    head = f"{ts(0)} a\n{ts(1)} b\n"
    log.write_text(head + f"{ts(2)} NVRM: Xid (PCI:0000:9c:00): 79, GPU has fallen off the bus.")
    old = time.time() - 60
    os.utime(log, (old, old))  # an archived file: its writer is done
    args = ["connect", "files", str(log), "--host", "node-a01", "--cursor", str(tmp_path / "cur.json"),
            "--bootstrap", settings.bootstrap_servers, "--topic", topic]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "published 3 records" in first.output
    assert f"{log}: the last line (byte {len(head)}, " in first.output and "has no newline: published" in first.output
    saved = json.loads((tmp_path / "cur.json").read_text())["files"][str(log)]
    assert saved["offset"] == log.stat().st_size and saved["line"] == 3 and saved["unterminated"] is True
    # its writer adds the newline and a line: the newline ends line 3, the line is line 4
    with log.open("a") as fh:
        fh.write(f"\n{ts(3)} d\n")
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and "published 1 records" in again.output, again.output
    # a file being written now (modified this second): its open line waits, with a word
    with log.open("a") as fh:
        fh.write(f"{ts(4)} half-writ")
    third = CliRunner().invoke(app, args)
    assert third.exit_code == 0 and "published 0 records" in third.output, third.output
    size = log.stat().st_size
    assert f"(byte {size - len(f'{ts(4)} half-writ')}, {len(f'{ts(4)} half-writ')} bytes) is not published yet" \
        in third.output
    got = values(consume(kafka_config, topic, 4))
    assert [(o["body"], o["position"]["line"]) for o in got] == [
        (f"{ts(0)} a", 1), (f"{ts(1)} b", 2),
        (f"{ts(2)} NVRM: Xid (PCI:0000:9c:00): 79, GPU has fallen off the bus.", 3), (f"{ts(3)} d", 4)]
    assert json.loads((tmp_path / "cur.json").read_text())["files"][str(log)]["line"] == 4


def test_a_one_shot_read_publishes_an_idle_files_last_line_and_notes_it_in_the_coverage(tmp_path):
    log = tmp_path / "x.log"
    log.write_text(f"{ts(0)} a\n{ts(1)} tail without newline")
    old = time.time() - 60
    os.utime(log, (old, old))
    conn = FilesConnector([log], host="h", cursor=CursorStore(tmp_path / "c.json"))
    got = list(conn.observations())
    assert [o.body for o in got] == [f"{ts(0)} a", f"{ts(1)} tail without newline"]
    assert conn.unterminated() == [(str(log), len(f"{ts(0)} a\n"), len(f"{ts(1)} tail without newline"), True)]
    assert f"the last line (byte {len(f'{ts(0)} a') + 1}, 45 bytes) has no newline" in conn.coverage()[0].detail
    assert conn.checkpoint()["files"][str(log)]["offset"] == log.stat().st_size


def test_a_declared_aggregator_file_lets_its_lines_name_their_host(tmp_path: Path) -> None:
    """``--aggregator``: a central syslog file's records carry ``attributes.aggregator`` and
    the host ``_aggregated`` (not this machine's), so its lines' host field names the event's
    host (``collected_on`` kept); a plain file's records stay its host's, the name evidence."""
    from correlators.config import EngineConfig

    pack = EngineConfig.default().pack
    line = (f"{ts(31)} node-a07 kernel: NVRM: Xid (PCI:0000:9c:00): 79, pid=1, name=python, "
            "GPU has fallen off the bus.\n")
    log = tmp_path / "syslog"
    log.write_text(line)
    central = FilesConnector([log], cursor=CursorStore(tmp_path / "a.json"), cluster="c1", aggregator=True)
    (record,) = central.poll()
    assert (record.host, record.attributes) == ("_aggregated", {"aggregator": True})
    assert [(e.host, e.attributes["collected_on"]) for e in pack.extract(record)] == [("node-a07", "_aggregated")]
    plain = FilesConnector([log], cursor=CursorStore(tmp_path / "b.json"), cluster="c1", host="node-a01")
    (record,) = plain.poll()
    assert (record.host, record.attributes) == ("node-a01", {})
    assert [(e.host, e.attributes["line_host"]) for e in pack.extract(record)] == [("node-a01", "node-a07")]
