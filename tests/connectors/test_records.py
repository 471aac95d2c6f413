"""connectors.records: multi-line records on real logs; record_span agrees with
group_records and stays bounded."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

from connectors.records import (
    MAX_RECORD_LINES,
    STRUCTURE_HINT,
    RawRecord,
    group_records,
    record_span,
)


def lines_of(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def multi(records: list[RawRecord]) -> list[tuple[int, int]]:
    """(first_line, physical line count) of the multi-line records."""
    return [(r.first_line, r.text.count("\n") + 1) for r in records if "\n" in r.text]


def test_rank_prefixed_tracebacks_with_nccl_block_and_summary(real_fixtures: Path) -> None:
    lines = lines_of(real_fixtures / "h200-2026-11" / "torchrun-nccl-duplicate-gpu.log")
    recs = list(group_records(lines))
    assert multi(recs) == [(10, 14), (24, 14), (41, 18), (59, 21)]
    rank1 = next(r for r in recs if r.first_line == 10).text.split("\n")
    assert rank1[0] == "[rank1]: Traceback (most recent call last):"
    assert rank1[-3:] == [
        "[rank1]: ncclInvalidUsage: This usually reflects invalid usage of NCCL library.",
        "[rank1]: Last error:",
        "[rank1]: Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 60",
    ]
    launcher = next(r for r in recs if r.first_line == 41).text.split("\n")
    assert launcher[-1].startswith("torch.distributed.elastic.multiprocessing.errors.ChildFailedError:")
    summary = next(r for r in recs if r.first_line == 59).text.split("\n")
    assert summary[0].startswith("=====") and summary[-1].startswith("=====")
    assert "  time      : 2026-11-30_01:20:23" in summary


def test_summary_with_embedded_tracebacks(real_fixtures: Path) -> None:
    lines = lines_of(real_fixtures / "h200-2026-11" / "torchrun-record-error-file.log")
    recs = list(group_records(lines))
    assert multi(recs) == [(5, 10), (15, 14), (32, 18), (50, 41)]
    assert recs[-1].text.split("\n")[-1].startswith("=====")


def test_plain_traceback(real_fixtures: Path) -> None:
    lines = lines_of(real_fixtures / "h200-2026-11" / "app-cupy-illegal-address.log")
    recs = list(group_records(lines))
    assert multi(recs) == [(2, 4), (7, 4)]
    assert recs[1].text.endswith("CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered")


def test_dmesg_nvrm_continuations(real_fixtures: Path) -> None:
    rc17 = list(group_records(lines_of(real_fixtures / "public" / "rc-17" / "lines.log")))
    assert multi(rc17) == [(6, 3)]
    assert rc17[5].text.split("\n")[2].strip() == "NVRM: the NVIDIA kernel module is unloaded."
    rc25 = list(group_records(lines_of(real_fixtures / "public" / "rc-25" / "lines.log")))
    assert multi(rc25) == [(1, 3)]
    assert "fallen off the bus" in rc25[0].text


def test_nccl_error_blocks_without_traceback(real_fixtures: Path) -> None:
    rc04 = list(group_records(lines_of(real_fixtures / "public" / "rc-04" / "lines.log")))
    assert [(r.first_line, r.text.count("\n") + 1) for r in rc04] == [(1, 4)]
    assert rc04[0].text.split("\n")[-1].startswith("socketProgressOpt: Call to recv")
    rc09 = list(group_records(lines_of(real_fixtures / "public" / "rc-09" / "lines.log")))
    assert multi(rc09) == [(1, 4)]
    assert rc09[1].text.startswith("[1,2]<stdout>:")


def test_single_lines_stay_single(real_fixtures: Path) -> None:
    lines = lines_of(real_fixtures / "h200-2026-11" / "dmesg-T.log")
    assert len(list(group_records(lines))) == len(lines)


def test_record_span_agrees_with_group_records_on_every_real_line(real_fixtures: Path) -> None:
    hint = re.compile(STRUCTURE_HINT)
    checked = 0
    for path in sorted(real_fixtures.rglob("*")):
        if not path.is_file() or path.suffix not in (".log", ".txt"):
            continue
        lines = lines_of(path)
        structure = [j for j, l in enumerate(lines) if hint.match(l)]
        recs = list(group_records(lines))
        assert "\n".join(r.text for r in recs) == "\n".join(lines)  # every line exactly once
        for r in recs:
            start, end = r.first_line - 1, r.first_line - 1 + r.text.count("\n") + 1
            for i in range(start, end):
                assert record_span(lines, i) == (start, end), (path.name, i)
                assert record_span(lines, i, structure_lines=structure) == (start, end)
                checked += 1
    assert checked > 2000


class CountingLines(Sequence[str]):
    """A real sequence of lines that counts element reads (how much record_span looks at)."""

    def __init__(self, lines: list[str]):
        self._lines = lines
        self.reads = 0

    def __len__(self) -> int:
        return len(self._lines)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            self.reads += len(range(*i.indices(len(self._lines))))
        else:
            self.reads += 1
        return self._lines[i]


def test_record_span_is_bounded_on_a_huge_file(real_fixtures: Path) -> None:
    block = lines_of(real_fixtures / "h200-2026-11" / "torchrun-nccl-duplicate-gpu.log")
    lines = CountingLines(block * 12_000)  # ~950k lines
    n = len(lines)
    i = n - 79 + 10  # inside the last rank-1 traceback
    assert record_span(lines, i) == (n - 79 + 9, n - 79 + 23)
    assert lines.reads < 4 * MAX_RECORD_LINES
    lines.reads = 0
    assert record_span(lines, n // 2) is not None
    assert lines.reads < 4 * MAX_RECORD_LINES


def test_structure_hint_means_single_line() -> None:
    lines = [f"plain line {i}" for i in range(600)]
    lines[300] = "Traceback (most recent call last):"
    lines[301] = '  File "x.py", line 1, in <module>'
    lines[302] = "ValueError: boom"
    hint = re.compile(STRUCTURE_HINT)
    for i in range(len(lines)):
        window = lines[max(0, i - MAX_RECORD_LINES + 1): i + 2]
        if not any(hint.match(l) for l in window):
            assert record_span(lines, i) == (i, i + 1)
    assert record_span(lines, 301) == (300, 303)


def test_overlong_traceback_is_cut() -> None:
    lines = ["Traceback (most recent call last):"] + ['  File "x.py", line 1, in f'] * 1000 + ["RecursionError: x"]
    recs = list(group_records(lines))
    assert recs[0].text.count("\n") + 1 == MAX_RECORD_LINES
    assert sum(r.text.count("\n") + 1 for r in recs) == len(lines)
    for r in recs[:5]:
        assert record_span(lines, r.first_line - 1)[0] == r.first_line - 1


def test_unclosed_summary_and_truncated_traceback() -> None:
    lines = ["x.ChildFailedError: ", "=" * 20, "/path FAILED", "Failures:"]
    assert [r.first_line for r in group_records(lines)] == [1, 2, 3, 4]
    lines = ["[rank0]: Traceback (most recent call last):", '[rank0]:   File "a.py", line 1',
             "[rank1]: Traceback (most recent call last):"]
    assert [r.first_line for r in group_records(lines)] == [1, 3]
