"""The operator rendering of a verdict and of the score table (rich, recorded console)."""

from __future__ import annotations


from rich.console import Console

from schemas.records import (
    Affected,
    Alternative,
    Attribution,
    CoverageEntry,
    Culprits,
    EvidenceItem,
    GpuRef,
    RootCause,
    Scope,
    Window,
    content_id,
)
from streams.render import format_ns, format_ranks, render_attribution, render_score_table
from streams.replay import ScoreRow

T0 = 1_796_001_664_123_000_000  # 2026-11-30 01:21:04.123 UTC
SEC = 1_000_000_000
MS = 1_000_000


def xid79_verdict(*, context_lines: int = 2) -> Attribution:
    """XID 79 on node-a01 GPU 0000:9c:00 (rank 0); ranks 1-15 on node-a01/node-a02 time out
    600 s later, back-dated to ~T0+17 ms; some scheduler context."""
    cause = EvidenceItem(at=T0, event_id="evt-xid", type="gpu.xid", role="cause",
                         host="node-a01", rank=0,
                         summary="XID 79 GPU has fallen off the bus (PCI 0000:9c:00)")
    symptoms = [
        EvidenceItem(at=T0 + 17 * MS + r * MS, event_id=f"evt-wd{r:02d}",
                     type="nccl.watchdog_timeout", role="symptom",
                     host="node-a01" if r < 8 else "node-a02", rank=r,
                     summary=f"watchdog timeout ALLREDUCE SeqNum=4711 ran 600017 ms (rank {r})")
        for r in range(1, 16)
    ] + [
        EvidenceItem(at=T0 + 601 * SEC, event_id="evt-reset", type="net.connection_reset",
                     role="symptom", host="node-a02", rank=9,
                     summary="Connection reset by peer 10.0.0.11:43122"),
    ]
    context = [
        EvidenceItem(at=T0 + 616 * SEC + i * SEC, event_id=f"evt-sched{i}", type="sched.job_state",
                     role="context", host="slurmctld", summary=f"job-1001 state FAILED ({i})")
        for i in range(context_lines)
    ]
    return Attribution(
        attribution_id=content_id("att", "workload", "c1", "job-1001"),
        revision=3,
        scope=Scope(kind="workload", id="job-1001", cluster="c1"),
        window=Window(start=T0 - 64 * SEC, end=T0 + 620 * SEC),
        outcome="failed",
        domain="gpu_hardware",
        root_cause=RootCause(code="gpu.xid.79", text="GPU fell off the bus on node-a01",
                             event_id="evt-xid"),
        culprits=Culprits(hosts=["node-a01"], ranks=[0],
                          gpus=[GpuRef(index=0, pci_bus_id="0000:9c:00")]),
        affected=Affected(hosts=["node-a01", "node-a02"], ranks=list(range(1, 16)),
                          workloads=["job-1001"]),
        symptoms=[s.event_id for s in symptoms],
        evidence=[*context, *reversed(symptoms), cause],  # unordered on purpose
        confidence=0.93,
        quality="definitive",
        alternatives=[Alternative(code="fabric.link_down", domain="fabric",
                                  text="link flap on leaf-02/Eth1/12", score=0.18,
                                  hosts=["node-a02"], ranks=[8, 9, 10, 11])],
        coverage=[
            CoverageEntry(source="logs/node-a01", status="present", records=5210, events=9),
            CoverageEntry(source="logs/node-a02", status="present", records=4980, events=9),
            CoverageEntry(source="metrics/node-a01", status="failed", unparsed=12,
                          detail="nvidia-smi CSV truncated"),
            CoverageEntry(source="fabric/leaf-02", status="empty"),
        ],
        ruleset_version="rules-2026.11.1",
        engine_version="0.1.0",
        decided_at=T0 + 620 * SEC,
    )


def rendered(att: Attribution, **kw) -> str:
    console = Console(record=True, width=120, color_system=None)
    render_attribution(att, console, **kw)
    return console.export_text()


def test_format_helpers() -> None:
    assert format_ns(T0) == "2026-11-30 01:21:04.123"
    assert format_ns(T0 + 999_999) == "2026-11-30 01:21:04.123"  # truncated, not rounded
    assert format_ns(0) == "1970-01-01 00:00:00.000"
    assert format_ranks(range(16)) == "0-15"
    assert format_ranks([8, 0, 1, 2, 5, 7, 2]) == "0-2,5,7-8"
    assert format_ranks([]) == ""


def test_header_culprits_symptoms_alternatives_coverage() -> None:
    text = rendered(xid79_verdict())
    lines = text.splitlines()
    assert "faultstream verdict" in lines[0]
    assert any("Scope" in l and "workload job-1001 (cluster c1)" in l for l in lines)
    assert any("Outcome" in l and "failed" in l for l in lines)
    assert any("Domain" in l and "gpu_hardware" in l for l in lines)
    assert any("gpu.xid.79 -- GPU fell off the bus on node-a01" in l for l in lines)
    assert any("Quality" in l and "definitive" in l for l in lines)
    assert any("Confidence" in l and "0.93" in l for l in lines)
    assert any("Revision" in l and "3" in l for l in lines)
    assert "2026-11-30 01:20:00.123 .. 2026-11-30 01:31:24.123 UTC" in text
    # culprits
    assert any("Hosts" in l and "node-a01" in l for l in lines)
    assert any("Ranks" in l and l.split("Ranks")[1].strip(" │") == "0" for l in lines)
    assert "0000:9c:00 / index 0" in text
    assert "Ports" not in text  # no port culprits: the row is left out
    # symptoms: 16 events on 2 hosts, 15 distinct ranks
    assert "Symptoms: 16 events on 2 hosts, 15 ranks" in text
    wd = next(l for l in lines if l.strip().startswith("nccl.watchdog_timeout"))
    assert wd.split() == ["nccl.watchdog_timeout", "15", "2", "1-15"]
    reset = next(l for l in lines if l.strip().startswith("net.connection_reset"))
    assert reset.split() == ["net.connection_reset", "1", "1", "9"]
    # alternatives
    alt = next(l for l in lines if "fabric.link_down" in l)
    assert alt.split()[:5] == ["fabric.link_down", "fabric", "0.18", "node-a02", "8-11"]
    # coverage
    failed = next(l for l in lines if l.strip().startswith("metrics/node-a01"))
    assert failed.split()[:4] == ["metrics/node-a01", "failed", "0", "12"]
    assert "nvidia-smi CSV truncated" in failed
    empty = next(l for l in lines if l.strip().startswith("fabric/leaf-02"))
    assert empty.split() == ["fabric/leaf-02", "empty", "0", "0", "0", "0"]


def test_timeline_is_chronological_with_roles() -> None:
    text = rendered(xid79_verdict())
    assert "Evidence timeline (19 events, UTC)" in text
    rows = [l for l in text.splitlines() if l.strip().startswith("2026-11-30")]
    assert len(rows) == 19
    first = rows[0].split()
    assert first[:6] == ["2026-11-30", "01:21:04.123", "cause", "gpu.xid", "node-a01", "0"]
    assert "XID 79 GPU has fallen off the bus" in rows[0]
    assert "XID 79 GPU has fallen off the bus (PCI 0000:9c:00)" in " ".join(text.split())
    second = rows[1].split()
    assert second[:6] == ["2026-11-30", "01:21:04.141", "symptom", "nccl.watchdog_timeout",
                          "node-a01", "1"]
    assert rows[-1].split()[:5] == ["2026-11-30", "01:31:21.123", "context", "sched.job_state",
                                    "slurmctld"]
    times = [" ".join(r.split()[:2]) for r in rows]
    assert times == sorted(times)
    assert "more (" not in text


def test_events_that_read_the_same_in_the_same_millisecond_are_one_row() -> None:
    att = xid79_verdict()
    cause = next(e for e in att.evidence if e.role == "cause")
    twin = cause.model_copy(update={"at": cause.at + 300_000, "event_id": "evt-xid-syslog"})  # 0.3 ms later
    later = cause.model_copy(update={"at": cause.at + 2 * MS, "event_id": "evt-xid-later"})  # another millisecond
    text = rendered(att.model_copy(update={"evidence": [*att.evidence, twin, later]}))
    rows = [line for line in text.splitlines() if line.strip().startswith("2026-11-30") and "gpu.xid" in line]
    assert len(rows) == 2
    assert [row.split()[1] for row in rows] == ["01:21:04.123", "01:21:04.125"]
    assert " ".join(text.split()).count("XID 79 GPU has fallen off the bus (PCI 0000:9c:00) (x2 events)") == 1


def test_timeline_truncation_keeps_cause_and_first_symptoms() -> None:
    att = xid79_verdict(context_lines=30)  # 1 cause + 16 symptoms + 30 context = 47
    text = rendered(att, max_timeline=10)
    rows = [l for l in text.splitlines() if l.strip().startswith("2026-11-30")]
    assert len(rows) == 10
    roles = [r.split()[2] for r in rows]
    assert roles[0] == "cause"
    # 9 rows left: at least half go to the earliest symptoms (ranks 1..), the rest in time order
    symptom_ranks = [int(r.split()[5]) for r in rows if r.split()[2] == "symptom"]
    assert symptom_ranks == list(range(1, 10))
    assert "... 37 more (30 context, 7 symptom)" in text


def test_truncation_with_only_symptoms_keeps_earliest() -> None:
    att = xid79_verdict(context_lines=0)
    text = rendered(att, max_timeline=4)
    rows = [l for l in text.splitlines() if l.strip().startswith("2026-11-30")]
    assert [r.split()[2] for r in rows] == ["cause", "symptom", "symptom", "symptom"]
    assert [r.split()[5] for r in rows] == ["0", "1", "2", "3"]
    assert "... 13 more (13 symptom)" in text


def test_empty_verdict_renders_placeholders() -> None:
    att = Attribution(
        attribution_id="att-empty", scope=Scope(kind="fabric_port", id="leaf-02/Eth1/12"),
        window=Window(start=T0, end=T0 + SEC), outcome="unknown", domain="unknown",
        root_cause=RootCause(code="unknown", text="no cause found"), confidence=0.0,
        quality="insufficient", ruleset_version="r", engine_version="e", decided_at=T0 + SEC,
    )
    text = rendered(att)
    assert "fabric_port leaf-02/Eth1/12" in text
    assert "none named" in text
    assert "Symptoms: 0 events on 0 hosts, 0 ranks" in text
    assert "Alternatives" not in text
    assert "Coverage: no sources reported" in text
    assert "Evidence: none" in text


def test_score_table_from_objects_with_misses() -> None:
    console = Console(record=True, width=160, color_system=None)
    render_score_table(
        [
            ScoreRow("xid79", "gpu.xid.79", "gpu.xid.79 (gpu_hardware, definitive)", ()),
            ScoreRow("stalled-rank", "proc.stalled", "nccl.watchdog_timeout (software, probable)",
                         ("root cause nccl.watchdog_timeout !~ proc.stalled", "ranks [0] != [13]")),
        ],
        console,
    )
    text = console.export_text()
    ok = next(l for l in text.splitlines() if l.strip().startswith("xid79"))
    assert ok.split()[-1] == "HIT"
    bad = next(l for l in text.splitlines() if l.strip().startswith("stalled-rank"))
    assert "MISS" in bad
    assert "root cause nccl.watchdog_timeout !~ proc.stalled; ranks [0] != [13]" in bad
    assert "1/2 hit, 1 miss" in text


def test_a_4000_source_coverage_table_is_summarised_with_the_problems_shown() -> None:
    """A 4,000-node job: its sources that are not present and those with unknown error lines
    are printed, then the present ones up to MAX_COVERAGE_ROWS; one row sums the rest."""
    from streams.render import MAX_COVERAGE_ROWS

    coverage = [CoverageEntry(source=f"file:logs/node-{i:04d}/dmesg.log", status="present", records=100, events=1)
                for i in range(4000)]
    coverage[3210] = CoverageEntry(source="file:logs/node-3210/dmesg.log", status="failed", detail="unreadable")
    coverage[3999] = CoverageEntry(source="file:logs/node-3999/dmesg.log", status="present", records=7,
                                   unrecognised=2)
    att = xid79_verdict().model_copy(update={"coverage": coverage})
    text = rendered(att)
    rows = [line for line in text.splitlines() if line.strip().startswith("file:logs/")]
    assert len(rows) == MAX_COVERAGE_ROWS == 40
    assert rows[0].split()[:2] == ["file:logs/node-0000/dmesg.log", "present"]
    assert any(r.split()[:2] == ["file:logs/node-3210/dmesg.log", "failed"] for r in rows)
    assert any(r.split()[:2] == ["file:logs/node-3999/dmesg.log", "present"] for r in rows)
    assert "... 3,960 more sources: 3,960 present (396,000 records, 3,960 events)" in text
    # a small table is printed whole
    assert "more sources" not in rendered(xid79_verdict())


def test_summary_fits_a_screen_and_names_what_verbose_adds() -> None:
    from streams.render import render_summary

    console = Console(record=True, width=80, color_system=None)
    render_summary(xid79_verdict(), console)
    text = console.export_text()
    lines = text.splitlines()
    assert len(lines) <= 40
    assert any("Quality" in l and "definitive, confidence 0.93, revision 3 (final)" in l for l in lines)
    assert any("Hosts" in l and "node-a01" in l for l in lines)  # culprits in the verdict panel
    wd = next(l for l in lines if l.strip().startswith("nccl.watchdog_timeout"))
    assert wd.split() == ["nccl.watchdog_timeout", "15", "2", "1-15"]
    flat = " ".join(text.split())
    assert "- fabric.link_down (fabric, score 0.18) on node-a02 rank 8-11: link flap on leaf-02/Eth1/12" in flat
    assert ("Coverage: 4 sources: 2 present, 1 failed, 1 empty (metrics/node-a01, fabric/leaf-02); "
            "--verbose: the coverage table and the 19-event timeline") in flat
    assert "Evidence timeline" not in text and "Rules" not in text


def test_narrow_timeline_stacks_the_summary_under_type_and_host() -> None:
    console = Console(record=True, width=80, color_system=None)
    render_attribution(xid79_verdict(), console)
    lines = console.export_text().splitlines()
    first = next(i for i, l in enumerate(lines) if l.strip().startswith("2026-11-30"))
    assert lines[first].split() == ["2026-11-30", "01:21:04.123", "cause", "gpu.xid", "node-a01", "rank", "0"]
    assert lines[first + 1].strip().startswith("XID 79 GPU has fallen off the bus")
    assert lines[first + 1].startswith(" " * 30)  # under the event column, not a row of its own
    assert max(len(l) for l in lines) <= 80
