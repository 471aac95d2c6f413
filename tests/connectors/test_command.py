"""The shared options of every ``faultstream connect`` command (connectors/command.py): the
CLI tree is walked and every connector must take the same options with the same meaning."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer
from typer.main import get_command
from typer.testing import CliRunner

from connectors.command import SHARED_OPTIONS, Shared, _settings, connector
from connectors.registry import BUILTIN
from streams.cli import app

ROOT = Path(__file__).resolve().parents[2]

EXPECTED = {
    # name -> (option strings, secondary option strings, is_flag, lower bound, default)
    "follow": (["--follow", "-f"], ["--once"], True, None, False),
    "interval": (["--interval"], [], False, 0.01, None),
    "cursor": (["--cursor"], [], False, None, None),
    "bootstrap": (["--bootstrap"], [], False, None, None),
    "topic": (["--topic"], [], False, None, None),
    "timeout": (["--timeout"], [], False, 0.1, 10.0),
}
#: connectors that read a fixed input once: --follow and --interval are refused
ONE_SHOT = {"bundle", "certifications", "topology"}


def _connect_commands() -> dict:
    """name -> the click command of ``faultstream connect <name>`` (typer's click objects),
    each loaded through the group as the command line does."""
    group = get_command(app).commands["connect"]
    ctx = typer.Context(group)
    return {name: group.get_command(ctx, name) for name in group.list_commands(ctx)}


def test_the_command_line_imports_a_connector_only_when_it_is_used() -> None:
    """``faultstream worker`` and the other commands load no connector module (the gRPC,
    OTLP and HTTP clients stay out of the worker's memory); ``connect <name>`` loads its own."""
    probe = ("import sys, streams.cli\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('grpc', 'opentelemetry', 'httpx')\n"
             "             or m in {t.split(':')[0] for t in __import__('connectors.registry').registry.BUILTIN.values()}))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    help_text = CliRunner().invoke(app, ["connect", "otlp", "--help"]).output
    assert "--from-topic" in help_text and "OTLP" in help_text


def test_every_connector_takes_the_shared_options_with_one_meaning() -> None:
    commands = _connect_commands()
    assert set(BUILTIN) <= set(commands)
    helps: dict[str, set[str]] = {name: set() for name in SHARED_OPTIONS}
    types: dict[str, set[str]] = {name: set() for name in SHARED_OPTIONS}
    for name, command in commands.items():
        params = {p.name: p for p in command.params}
        for option, (opts, secondary, is_flag, low, default) in EXPECTED.items():
            p = params.get(option)
            assert p is not None and p.param_type_name == "option", f"connect {name}: no --{option}"
            assert (p.opts, p.secondary_opts, p.is_flag, p.min, p.default) == (
                opts, secondary, is_flag, low, default), f"connect {name} --{option}"
            types[option].add(repr(p.type_descriptor.annotation))
            # the same sentence everywhere; only the connector's default after it differs
            helps[option].add(p.help.split(" (default:")[0])
        # no connector keeps an option of its own for what a shared one says
        spelled = {o for p in command.params for o in (*p.opts, *getattr(p, "secondary_opts", []))}
        assert not spelled & {"--poll-s", "--state", "--once-only"}, f"connect {name}: {spelled}"
    assert all(len(texts) == 1 for texts in helps.values()), helps
    assert all(len(names) == 1 for names in types.values()), types


def test_declared_defaults_appear_in_the_help() -> None:
    commands = _connect_commands()
    interval = {name: c.params for name, c in commands.items()}
    text = {name: {p.name: p.help for p in params} for name, params in interval.items()}
    assert "(default: 10 s)" in text["slurm"]["interval"]
    assert "(default: --step)" in text["prometheus"]["interval"]
    assert ".state/cursors/slurm-<cluster>.json" in text["slurm"]["cursor"]
    assert "catalogue's certifications topic" in text["certifications"]["topic"]
    for name in ONE_SHOT:
        assert "not available" in text[name]["interval"]
        # taken (a clear error says they do not apply) but not listed in the help
        hidden = {p.name for p in commands[name].params if getattr(p, "hidden", False)}
        assert {"follow", "interval"} <= hidden and "timeout" not in hidden, (name, hidden)
    hidden = {p.name for p in commands["otlp"].params if getattr(p, "hidden", False)}
    assert "cursor" in hidden and "follow" not in hidden
    assert "--install-completion" not in CliRunner().invoke(app, ["connect", "files", "--help"]).output


@pytest.mark.parametrize("name,args", [
    ("bundle", ["examples/incidents/public-rc15-pcie-aer-xid79-multinode"]),
    ("certifications", ["x.json", "--cluster", "c1"]),
    ("topology", ["--cluster", "c1", "--hosts", "h"]),
])
def test_one_shot_connectors_refuse_follow(name: str, args: list[str]) -> None:
    for extra in (["--follow"], ["--interval", "3"]):
        result = CliRunner().invoke(app, ["connect", name, *args, *extra])
        assert result.exit_code == 2, result.output
        assert "reads its input once: --follow and --interval do not apply" in result.output
    result = CliRunner().invoke(app, ["connect", name, *args, "--cursor", "c.json"])
    assert result.exit_code == 2 and "keeps no position: --cursor does not apply" in result.output


def test_settings_from_the_shared_options(monkeypatch) -> None:
    monkeypatch.setenv("FAULTSTREAM_TOPIC_PREFIX", "t1")
    none = dict(follow=False, interval=None, cursor=None, bootstrap=None, topic=None, timeout=10.0)
    s = _settings(none, {"cluster": "c9", "step": 15.0}, interval="step",
                  cursor=".state/cursors/p-{cluster}.json", topic="observations")
    assert (s.follow, s.interval_s, s.cursor, s.topic) == (False, 15.0, Path(".state/cursors/p-c9.json"),
                                                           "t1.observations")
    s = _settings(dict(none, follow=True, interval=0.5, cursor=Path("/x.json"), topic="mine"), {"step": 15.0},
                  interval="step", cursor=".state/cursors/p.json", topic="observations")
    assert (s.follow, s.interval_s, s.cursor, s.topic) == (True, 0.5, Path("/x.json"), "mine")
    s = _settings(none, {}, interval=10.0, cursor=None, topic="topology")
    assert (s.interval_s, s.cursor, s.cursor_store(), s.topic) == (10.0, None, None, "t1.topology")
    assert _settings(dict(none, timeout=2.5), {}, interval=None, cursor=False, topic="topology").timeout_s == 2.5


def test_kafka_settings_are_read_once_and_invalid_ones_exit_2(monkeypatch) -> None:
    monkeypatch.setenv("KAFKA_SECURITY_PROTOCOL", "SASL_SSL")  # without a mechanism: invalid
    s = Shared(follow=False, interval_s=None, cursor=None, topic="t", bootstrap="127.0.0.1:1")
    with pytest.raises(typer.Exit) as exc:
        s.kafka  # noqa: B018
    assert exc.value.exit_code == 2
    monkeypatch.delenv("KAFKA_SECURITY_PROTOCOL")
    s = Shared(follow=False, interval_s=None, cursor=None, topic="t", bootstrap="127.0.0.1:1")
    assert s.kafka is s.kafka and s.kafka.bootstrap_servers == "127.0.0.1:1"


def test_a_connector_cannot_redefine_a_shared_option() -> None:
    with pytest.raises(TypeError, match="shared options"):
        @connector(interval=1.0)
        def broken(opts: Shared, cursor: str = "") -> None:  # noqa: ARG001
            """Not a connector."""


@pytest.mark.parametrize("name,args", [
    ("files", ["examples/incidents/public-rc15-pcie-aer-xid79-multinode/logs/node-a02/dmesg-raw.log"]),
    ("bundle", ["examples/incidents/public-rc15-pcie-aer-xid79-multinode"]),
])
@pytest.mark.slow
def test_a_broker_that_does_not_answer_ends_a_one_shot_run_within_its_timeout(name: str, args: list[str]) -> None:
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "streams.cli", "connect", name, *args, "--bootstrap", "127.0.0.1:9",
                          "--timeout", "2"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines()[-1].startswith("error: Kafka at 127.0.0.1:9: no broker answered within 2 s")
    # librdkafka's "connection refused", repeated every few ms, is shown once
    assert sum("Connection refused" in line for line in out.stderr.splitlines()) <= 1, out.stderr
    assert "published" not in out.stderr
    assert time.monotonic() - started < 30
