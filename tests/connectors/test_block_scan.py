"""The bundle reader's batch front end: lines found in a file's bytes by one vectorised pass
(:class:`connectors.records.BlockLines`, Hyperscan keyword offsets, the polars per-line facts)
give the records, times and coverage the line-by-line reading gives.

The reference is the full path (``keywords=None``, every record materialised from the lines
``text.split("\\n")`` gives): the fast path's observations must be exactly the full path's
records that hold a keyword, and both paths' coverage must be equal, on files built to hit
each edge of the byte-level reading (CRLF, NUL, invalid UTF-8, Unicode and C0 whitespace,
missing final newline, long lines, multi-line records, raw and relative dmesg, a keyword on
the last line, many files in one scan batch)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import connectors.bundle as bundle_mod
from connectors.bundle import MAX_BODY_CHARS, BundleConnector
from connectors.records import BlockLines, record_span
from correlators.rules import load_rule_pack
from correlators.rules.scan import LiteralSet

WORKLOAD = ("workload_id: job-1\nstate: FAILED\nstart: 2026-11-30T01:00:00Z\nend: 2026-11-30T02:00:00Z\n"
            "nodes: [node-a01, node-a02]\n")
XID = "[Mon Nov 30 01:10:00 2026] NVRM: Xid (PCI:0000:9c:00): 79, pid=0, GPU has fallen off the bus."
INFO = "node-a01:528:901 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC"
GLOG = "I1130 01:11:00.000000 550 agent.py:100] heartbeat ok"

FILES: dict[str, bytes] = {
    "crlf.log": ("\r\n".join([GLOG, XID, INFO, "Capacity:", "  nvidia.com/gpu: 8", XID]) + "\r\n").encode(),
    "nul.log": (GLOG + "\n" + XID.replace("pid=0", "pid=\x000") + "\n" + INFO + "\n").encode(),
    "bad-utf8.log": GLOG.encode() + b"\n" + XID.encode() + b" \xff\xfe tail\n" + b"\xc3 " + INFO.encode() + b"\n",
    "blank.log": ("\n".join([GLOG, "", "   ", "\u3000\u00a0", "\x1c\x1d", XID, "\t"]) + "\n").encode(),
    "no-final-newline.log": (GLOG + "\n" + INFO + "\n" + XID).encode(),
    "long.log": (GLOG + "\n" + XID + " " + "é" * (MAX_BODY_CHARS + 10) + "\n" + "x" * (MAX_BODY_CHARS + 5)
                 + "\n" + "é" * (MAX_BODY_CHARS // 2 + 5) + "\n").encode(),
    "traceback.log": "\n".join([
        GLOG, "[rank3]: Traceback (most recent call last):", '[rank3]:   File "/x/train.py", line 8, in <module>',
        "[rank3]:     dist.all_reduce(x)",
        "[rank3]: torch.distributed.DistBackendError: NCCL error in: x.cpp:1, remote process exited",
        "[rank3]: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
        "[rank3]: Last error:", "[rank3]: socketProgressOpt: Call to recv from 10.0.0.2<1> failed", INFO,
        "==========", "ok",
    ]).encode() + b"\n",
    "raw-dmesg.log": ("[   12.345678] NVRM: loading NVIDIA UNIX x86_64 Kernel Module\n"
                      "[  100.000001] NVRM: Xid (PCI:0000:9c:00): 79, pid=0, GPU has fallen off the bus.\n"
                      "[  +0.000123] NVRM: Xid (PCI:0000:9c:00): 48, pid=0, An uncorrectable double bit error\n").encode(),
    "only-blank.log": b"\n \n\t\n",
    "untimed.log": ("just text\nmore text\n" + XID.split("] ", 1)[1] + "\n").encode(),
}


def _bundle(root: Path) -> Path:
    (root / "logs" / "node-a01").mkdir(parents=True)
    (root / "logs" / "node-a02").mkdir(parents=True)
    (root / "workload.yaml").write_text(WORKLOAD)
    for name, data in FILES.items():
        (root / "logs" / "node-a01" / name).write_bytes(data)
    # the same files again on a second host: several files per scan batch
    for name, data in FILES.items():
        (root / "logs" / "node-a02" / name).write_bytes(data)
    return root


def _read(path: Path, keywords):
    conn = BundleConnector(path, keywords=keywords)
    return list(conn.observations()), conn.coverage(), conn.lines_read


@pytest.mark.parametrize("batch_bytes", [1, 64 * 1024 * 1024])
def test_fast_path_gives_the_full_paths_keyword_records(tmp_path, monkeypatch, batch_bytes):
    monkeypatch.setattr(bundle_mod, "SCAN_BATCH_BYTES", batch_bytes)
    root = _bundle(tmp_path / "b")
    keywords = load_rule_pack().prefilter_keywords
    fast, fast_cov, fast_lines = _read(root, keywords)
    full, full_cov, full_lines = _read(root, None)
    words = LiteralSet(keywords)
    expected = [o for o in full if any(words.search(line) for line in o.body.split("\n"))]
    assert [o.model_dump() for o in fast] == [o.model_dump() for o in expected]
    assert fast_cov == full_cov
    assert fast_lines == full_lines == sum(
        len(d.decode("utf-8", "replace").replace("\r\n", "\n").rstrip("\n").split("\n")) + (d.endswith(b"\n\n"))
        for d in FILES.values()) * 2
    # the edges were reached: a record per XID line, multi-line records whole, cut bodies
    bodies = [o.body for o in fast if o.host == "node-a01"]
    assert any(b.startswith("[rank3]: Traceback") and b.endswith("failed") for b in bodies)
    assert any("\u2400" in b for b in bodies)  # NUL shown as U+2400
    assert any("\ufffd" in b for b in bodies)  # invalid UTF-8 replaced
    assert any(o.attributes.get("truncated") for o in fast)
    cov = {c.source: c for c in fast_cov}
    assert cov["file:logs/node-a01/only-blank.log"].status == "empty"
    assert "no non-blank lines" not in cov["file:logs/node-a01/blank.log"].detail
    assert cov["file:logs/node-a01/long.log"].detail.endswith(f"2 lines over {MAX_BODY_CHARS} characters: their records cut")
    assert "2 raw dmesg lines" in cov["file:logs/node-a01/raw-dmesg.log"].detail


def test_c0_separators_are_blank_to_python_not_to_the_scan(tmp_path):
    root = tmp_path / "b"
    (root / "logs" / "node-a01").mkdir(parents=True)
    (root / "workload.yaml").write_text(WORKLOAD)
    (root / "logs" / "node-a01" / "sep.log").write_bytes(b"\x1c\x1d\n\x1e\n")
    _, cov, _ = _read(root, load_rule_pack().prefilter_keywords)
    entry = next(c for c in cov if c.source == "file:logs/node-a01/sep.log")
    # Python's strip removes U+001C..U+001F: the file has no non-blank line; polars counts
    # them as lines without a timestamp
    assert entry.status == "empty" and entry.unparsed == 2


@pytest.mark.parametrize("text", ["a\n\nxé\nlast", "a\n\nxé\nlast\n", "\n", "x", "\n\n", "é\r\nb"])
def test_block_lines_equal_split_lines(text):
    block = BlockLines(text.encode())
    want = text.split("\n")
    if text.endswith("\n"):
        want.pop()
    assert list(block) == want
    assert len(block) == len(want)
    assert block[-1] == want[-1]
    assert block[1:3] == want[1:3]
    assert block.text(0, len(want)) == "\n".join(want)
    offsets = np.arange(len(text.encode()))
    lines = block.line_of(offsets)
    # every byte belongs to the line whose bytes (with its newline) hold it
    for off, j in zip(offsets.tolist(), lines.tolist()):
        assert block.starts[j] <= off <= block.ends[j]


def test_block_lines_serve_record_span():
    lines = ["[rank1]: Traceback (most recent call last):", '[rank1]:   File "a.py", line 1, in f',
             "[rank1]: RuntimeError: boom", "after"]
    block = BlockLines(("\n".join(lines) + "\n").encode())
    assert record_span(block, 1) == record_span(lines, 1) == (0, 3)
    assert record_span(block, 3) == (3, 4)


def test_match_ends_reports_every_occurrence():
    words = LiteralSet(["Xid", "fallen off"])
    data = f"{XID}\n{INFO}\n{XID}\n".encode()
    ends = words.match_ends(data)
    first = data.index(b"Xid") + 3
    assert first in ends and len(ends) == 4
    assert BlockLines(data).line_of(np.asarray(ends) - 1).tolist() == [0, 0, 2, 2]
    assert words.match_ends(b"") == [] and LiteralSet([]).match_ends(data) == []
