"""The command line in a terminal: a replayed verdict fits a screen by default, ``--verbose``
adds the coverage and the whole timeline, piped output follows ``COLUMNS`` and keeps file names
whole at 80 columns, no timeline row is printed twice, ``--format line`` gives one line per
verdict, shell completion installs, and the help of every command has no ``<bool>`` placeholder,
no line broken mid-sentence and one name per option meaning."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from schemas.records import Attribution, Culprits, RootCause, Scope, Window
from streams.cli import app
from streams.render import verdict_line

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "incidents"
runner = CliRunner()


def replay(bundle: str, *args: str, columns: int | None = 80) -> str:
    env = {"COLUMNS": str(columns)} if columns else {}
    result = runner.invoke(app, ["replay", str(EXAMPLES / bundle), "--no-store", *args], env=env)
    assert result.exit_code == 0, result.output
    return result.stdout


def verdict_blocks(text: str) -> list[list[str]]:
    """The printed verdicts: each from its ``faultstream verdict`` panel to the next one."""
    blocks: list[list[str]] = []
    for line in text.splitlines():
        if "faultstream verdict" in line:
            blocks.append([])
        if blocks:
            blocks[-1].append(line)
    return blocks


@pytest.mark.parametrize("bundle", ["h200-xid31-illegal-address", "backdate-undated-watchdog-pt22",
                                    "multinode-stalled-rank-11", "stacks-shared-checkpoint-read",
                                    "h200-torchrun-rank1-exception"])
def test_a_verdict_fits_an_80_column_screen_by_default(bundle: str) -> None:
    (block,) = verdict_blocks(replay(bundle))
    assert len(block) <= 40, "\n".join(block)
    text = "\n".join(block)
    assert "Root cause" in text and "Reasoning" in text and "Symptoms:" in text
    assert "Evidence timeline" not in text and "--verbose: the coverage table" in text
    assert not any(len(line) > 80 for line in block)


def test_every_verdict_of_a_fabric_incident_fits_a_screen_piped() -> None:
    blocks = verdict_blocks(replay("fabric-port-flap-two-jobs", columns=None))
    assert len(blocks) == 4  # two jobs, the port, the incident
    assert all(len(b) <= 40 for b in blocks), [len(b) for b in blocks]
    assert max(len(line) for b in blocks for line in b) == 140  # piped without COLUMNS: 140


def test_verbose_adds_the_coverage_and_every_timeline_row() -> None:
    (att,) = [json.loads(line) for line in replay("h200-xid31-illegal-address", "--format", "json").splitlines()]
    text = replay("h200-xid31-illegal-address", "--verbose", columns=160)
    assert "Coverage" in text and "Evidence timeline (6 events, UTC)" in text
    for entry in att["coverage"]:
        row = next(line for line in text.splitlines() if line.strip().startswith(entry["source"] + " "))
        assert row.split()[1:3] == [entry["status"], str(entry["records"])]
    rows = [line for line in text.splitlines() if line.strip().startswith("2026-11-30")]
    # 6 events: the three cuda.error lines that read the same are one row
    assert len(rows) == 4 and "more (" not in text
    assert text.count("(x3 events)") == 1


def test_no_timeline_row_is_printed_twice() -> None:
    for bundle, events in (("backdate-undated-watchdog-pt22", 43), ("stacks-shared-checkpoint-read", 18),
                           ("history-xid13-43-three-programs-one-gpu", 9)):
        (att,) = [json.loads(line) for line in replay(bundle, "--format", "json").splitlines()]
        ids = [e["event_id"] for e in att["evidence"]]
        assert len(ids) == len(set(ids)) == events  # an event is in the trail once, in its strongest role
        text = replay(bundle, "--verbose", columns=200)
        rows = [line.rstrip() for line in text.splitlines() if re.match(r"\s+2026-\d\d-\d\d ", line)]
        assert rows and len(rows) == len(set(rows)), bundle


def test_80_columns_keep_file_names_whole() -> None:
    (att,) = [json.loads(line) for line in replay("backdate-undated-watchdog-pt22", "--format", "json").splitlines()]
    text = replay("backdate-undated-watchdog-pt22", "--verbose", columns=80)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    for entry in att["coverage"]:
        assert any(entry["source"] in line for line in lines), entry["source"]
    assert "…" not in text  # nothing cut short


def test_piped_output_follows_columns() -> None:
    for columns in (60, 100, 200):
        text = replay("h200-xid31-illegal-address", columns=columns)
        assert max(len(line) for line in text.splitlines()) == columns


def test_format_line_gives_one_line_per_verdict() -> None:
    atts = [Attribution.model_validate_json(line)
            for line in replay("fabric-port-flap-two-jobs", "--format", "json").splitlines()]
    lines = replay("fabric-port-flap-two-jobs", "--format", "line", columns=60).splitlines()
    assert lines == [verdict_line(a) for a in atts]  # whole lines, never wrapped at 60 columns
    job = next(line for line, a in zip(lines, atts) if a.scope.kind == "workload")
    fields = job.split()
    assert fields[2].startswith("workload:job-") and fields[3:6] == ["r1", "final", atts[0].quality]
    assert fields[7] == atts[0].root_cause.code
    assert "--json" not in " ".join(lines)
    # the hidden --json is still --format json
    assert replay("fabric-port-flap-two-jobs", "--json") == replay("fabric-port-flap-two-jobs", "--format", "json")


def test_verdict_line_of_a_withdrawn_revision() -> None:
    att = Attribution(
        attribution_id="att-1", revision=3, status="final", scope=Scope(kind="workload", id="job-7", cluster="c1"),
        window=Window(start=0, end=1_000_000_000), outcome="failed", domain="unknown", root_cause=None,
        superseded_by=["att-2"], culprits=Culprits(hosts=["node-a01"], ranks=[0, 1, 2, 5]), confidence=0.0,
        quality="insufficient", ruleset_version="r", engine_version="e", decided_at=1_796_001_664_123_000_000)
    assert verdict_line(att) == ("2026-11-30 01:21:04.123 workload:job-7 r3 final insufficient 0.00 withdrawn "
                                 "hosts=node-a01 ranks=0-2,5 superseded_by=att-2")
    hostile = att.model_copy(update={"root_cause": RootCause(code="x", text="t"),
                                     "culprits": Culprits(hosts=["node-a01\x1b[31m\nnext"])})
    assert "\x1b" not in verdict_line(hostile) and "\n" not in verdict_line(hostile)


def _commands(cmd, path=()):
    """(path, click command) of every command and group below ``cmd`` (lazily loaded ones,
    the connectors, through the group as the command line gets them)."""
    yield path, cmd
    if hasattr(cmd, "list_commands"):
        ctx = typer.Context(cmd)
        for name in cmd.list_commands(ctx):
            yield from _commands(cmd.get_command(ctx, name), (*path, name))


COMMANDS = list(_commands(typer.main.get_command(app)))


def _help(path: tuple[str, ...]) -> str:
    result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "80"}, prog_name="faultstream")
    assert result.exit_code == 0, (path, result.output)
    return result.stdout


def test_help_has_no_bool_placeholder_and_no_line_broken_mid_sentence() -> None:
    assert len(COMMANDS) > 25
    for path, _ in COMMANDS:
        text = _help(path)
        assert "<bool>" not in text and "BOOLEAN" not in text and "``" not in text, path
        # the description: re-wrapped paragraphs, each line filled before the next begins
        description = text.split("\n\n", 1)[1].split("\nOptions:")[0].split("\nArguments:")[0]
        for paragraph in description.split("\n\n"):
            lines = [line.strip() for line in paragraph.splitlines() if line.strip()]
            for line, following in zip(lines, lines[1:]):
                assert len(line) + 1 + len(following.split()[0]) > 76, (path, line, following)


def test_the_same_option_means_the_same_thing_everywhere() -> None:
    """One name per meaning: --format for the output, --timeout for the wait on a broker or
    server, --topic-prefix for the topic names, --bootstrap for the servers; the former names
    are hidden aliases, and a visible name is a flag everywhere or takes a value everywhere."""
    seen: dict[str, set[str]] = {}
    for path, cmd in COMMANDS:
        visible = {o for p in cmd.params if p.param_type_name == "option" and not p.hidden for o in p.opts}
        for p in cmd.params:
            if p.param_type_name == "option" and not p.hidden:
                for name in p.opts:
                    seen.setdefault(name, set()).add("flag" if getattr(p, "is_flag", False) else "value")
        assert not visible & {"--json", "--kafka-timeout", "--connect-timeout", "--prefix", "--output"}, path
        if path in {("replay",), ("verdicts",), ("remediation", "list"), ("remediation", "show")}:
            assert "--format" in visible and "--timeout" in visible and "--bootstrap" in visible, path
        if path in {("replay",), ("bundle", "export"), ("topics", "create"), ("topics", "list")}:
            assert "--topic-prefix" in visible, path
    for name in ("--timeout", "--format", "--bootstrap", "--topic-prefix", "--cluster", "--workload", "--follow"):
        assert len(seen[name]) == 1, (name, seen[name])


@pytest.mark.slow
def test_old_option_names_still_work(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for args in (["verdicts", "--connect-timeout", "1"], ["verdicts", "--timeout", "1"]):
        result = runner.invoke(app, [*args, "--bootstrap", f"127.0.0.1:{port}"])
        assert result.exit_code == 2 and "no broker answered within 1 s" in result.output, result.output
    for fmt in (["--json"], ["--format", "json"]):
        result = runner.invoke(app, ["remediation", "list", *fmt, "--timeout", "1", "--bootstrap", f"127.0.0.1:{port}"])
        assert result.exit_code == 2 and "did not answer within 1 s" in result.output, result.output
    listed = runner.invoke(app, ["topics", "list", "--prefix", "t-9"], env={"COLUMNS": "200"})
    assert listed.exit_code == 0 and "t-9.attributions" in listed.stdout


def test_shell_completion_installs(tmp_path: Path) -> None:
    shown = runner.invoke(app, ["--show-completion", "bash"], prog_name="faultstream",
                          env={"SHELL": "/bin/bash", "HOME": str(tmp_path)})
    assert shown.exit_code == 0, shown.output
    assert "_FAULTSTREAM_COMPLETE" in shown.stdout and "complete " in shown.stdout
    installed = runner.invoke(app, ["--install-completion", "bash"], prog_name="faultstream",
                              env={"SHELL": "/bin/bash", "HOME": str(tmp_path)})
    assert installed.exit_code == 0, installed.output
    script = tmp_path / ".bash_completions" / "faultstream.sh"
    assert script.is_file() and "_FAULTSTREAM_COMPLETE" in script.read_text()
    assert str(script) in (tmp_path / ".bashrc").read_text()


def test_verdicts_follow_prints_one_line_per_revision(kafka_bootstrap: str, tmp_path: Path) -> None:
    """Two revisions of one verdict and a tombstone on a real broker: ``verdicts --follow
    --format line`` prints one line per revision as they come, and nothing for the tombstone."""
    import os
    import subprocess
    import sys
    import uuid

    from schemas.records import canonical_json
    from schemas.topics import catalogue, create_topics
    from tests.schemas.test_schema_files import sample_attribution
    from tests.streams.test_poison import produce

    prefix = f"term-{uuid.uuid4().hex[:8]}"
    topic = catalogue(prefix)["attributions"]
    create_topics({"bootstrap.servers": kafka_bootstrap}, [topic])
    first = sample_attribution().model_copy(update={"status": "provisional", "revision": 1})
    second = first.model_copy(update={"status": "final", "revision": 2})
    produce(kafka_bootstrap, topic.name, [(b"k", canonical_json(first).encode()), (b"k", None)])
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "FAULTSTREAM_TOPIC_PREFIX": prefix}
    proc = subprocess.Popen([sys.executable, "-m", "streams.cli", "verdicts", "--follow", "--format", "line"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    def next_line(timeout_s: float = 60) -> str:
        import select

        ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
        assert ready, f"no line within {timeout_s} s; the command {'ended: ' + proc.stderr.read() if proc.poll() is not None else 'is still waiting'}"
        return proc.stdout.readline().rstrip("\n")

    try:
        assert next_line() == verdict_line(first)
        produce(kafka_bootstrap, topic.name, [(b"k", canonical_json(second).encode())])
        line = next_line()
        assert line == verdict_line(second) and " r2 final " in line
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert proc.stdout.read() == ""  # nothing for the tombstone, nothing more
