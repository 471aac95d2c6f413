"""printf formats compiled into patterns (correlators/rules/printf.py) and rules given as a
vendor's format string (a rule's ``format:``/``args:``)."""

from __future__ import annotations

import re

import pytest
import yaml

from correlators.rules import RuleError, load_rule_pack
from correlators.rules.printf import compile_format, conversions, literal_runs
from tests.correlators.test_rules import obs_for


def groups(fmt, args, line, **kw):
    m = re.search(compile_format(fmt, args, **kw), line)
    return None if m is None else m.groupdict()


def test_every_conversion_reads_what_printf_prints():
    fmt = "dev %s port %u rc %d mask 0x%08x ptr %p ratio %.2f%% ch %c size %zu neg %lld"
    args = ["dev", "port", "rc", "mask", "ptr", "ratio", "ch", "size", "neg"]
    line = "dev mlx5_3 port 1 rc -110 mask 0x0000ff0f ptr 0x7f12ab ratio 12.50% ch Y size 6291456 neg -1"
    assert groups(fmt, args, line) == {"dev": "mlx5_3", "port": "1", "rc": "-110", "mask": "0000ff0f",
                                       "ptr": "0x7f12ab", "ratio": "12.50", "ch": "Y", "size": "6291456",
                                       "neg": "-1"}


def test_a_last_string_reads_to_the_end_of_the_line_and_inner_ones_lazily():
    fmt = "NET/IB : %s:%d Got async event : %s"
    line = "node-a01:4107:4160 [0] NCCL WARN NET/IB : mlx5_1:1 Got async event : port error\nnext line"
    assert groups(fmt, ["device", "port", "event"], line) == {"device": "mlx5_1", "port": "1", "event": "port error"}


def test_blanks_required_or_optional_and_a_printk_line_end():
    assert groups("Detected %d volatile  ECC\n", ["n"], "Detected 2 volatile ECC") == {"n": "2"}
    assert groups("Detected %d volatile ECC", ["n"], "Detected 2volatileECC") is None
    assert groups("Detected %d volatile ECC", ["n"], "Detected 2volatileECC", blanks="optional") == {"n": "2"}


def test_skipped_and_unnamed_arguments_are_not_captured():
    assert groups("a %d b %d c %d", ["_", "two"], "a 1 b 2 c 3") == {"two": "2"}


@pytest.mark.parametrize("fmt, args, msg", [
    ("a %d", ["x", "y"], "2 argument names for 1 conversions"),
    ("a %d %d", ["x", "x"], "used twice"),
    ("a %y", [], "starts no conversion"),
])
def test_bad_formats_are_refused(fmt, args, msg):
    with pytest.raises(ValueError, match=msg):
        compile_format(fmt, args)


def test_conversions_and_literal_runs():
    assert conversions("%s:%d 100%% %-5.2lf") == ["s", "d", "f"]
    assert literal_runs("NET/IB : %s:%d Got   async event") == ["NET/IB :", ":", "Got async event"]


def _pack_with(tmp_path, rule):
    path = tmp_path / "extra.yaml"
    path.write_text(yaml.safe_dump({"domain": "test", "rules": [rule]}))
    return load_rule_pack([path])


RULE = {
    "id": "test.ib_async", "version": 1, "event": "nccl.ib_async_event",
    "source": "NCCL src/transport/net_ib.cc ncclIbAsyncThreadMain WARN (format as printed, for this test)",
    "format": "NET/IB : %s:%d Got async event : %s", "args": ["device", "port", "event"],
    "fields": {"port": "int"},
    "examples": [{"line": "node-a01:4107:4160 [0] NCCL WARN NET/IB : mlx5_0:1 Got async event : GID table change",
                  "expect": {"type": "nccl.ib_async_event", "attributes": {"device": "mlx5_0", "port": 1}}}],
}


def test_a_rule_given_as_a_format_extracts_its_arguments_as_fields(tmp_path):
    pack = _pack_with(tmp_path, RULE)
    rule = pack.rule("test.ib_async")
    assert rule.keywords == ("Got async event :",)
    [e] = pack.apply(rule, obs_for("node-a01:4107:4160 [0] NCCL WARN NET/IB : mlx5_1:1 Got async event : port error"))
    assert {k: e.attributes[k] for k in ("device", "port", "event")} == {"device": "mlx5_1", "port": 1, "event": "port error"}


@pytest.mark.parametrize("change, msg", [
    ({"pattern": "x"}, "give a pattern or a format, not both"),
    ({"format": "a %d", "args": ["x"]}, "too short: give keywords"),
    ({"args": ["a", "b", "c", "d"]}, "4 argument names for 3 conversions"),
    ({"format": ""}, "must be the printf format string"),
])
def test_a_bad_format_rule_names_its_file_rule_and_field(tmp_path, change, msg):
    with pytest.raises(RuleError, match=f"rule 'test.ib_async'.*{re.escape(msg)}"):
        _pack_with(tmp_path, {**RULE, **change})
