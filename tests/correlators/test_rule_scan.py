"""The engine's prefilter (correlators.rules.scan.LiteralSet, Hyperscan) and the telemetry
rules' precompiled conditions answer exactly as the plain tests they replace."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from correlators.rules import load_rule_pack
from correlators.rules.engine import _gates, _passes
from correlators.rules.model import Condition, Rule
from correlators.rules.scan import LiteralSet, minimal_literals
from correlators.unrecognised import PREFILTER_LITERALS

PACK = load_rule_pack()
WORDS = PACK.prefilter_keywords
SCANNER = LiteralSet(WORDS)
MINIMAL = minimal_literals(WORDS)
MINIMAL_SCANNER = LiteralSet(MINIMAL)

# text made of pieces of real keywords, near misses and other characters (non-ASCII and lone
# surrogates included: JSON can carry both)
pieces = st.one_of(
    st.sampled_from(WORDS),
    st.sampled_from(WORDS).map(lambda w: w[:-1]),
    st.sampled_from(WORDS).map(lambda w: w[1:]),
    st.sampled_from(WORDS).map(lambda w: w.lower()),
    st.text(max_size=12),
    st.sampled_from(["\ud800", "é", "\x00", "\n", " ", "ß"]),
)


@settings(max_examples=600, deadline=None)
@given(st.lists(pieces, max_size=8).map("".join))
def test_scanner_answers_as_substring_tests(text):
    assert SCANNER.search(text) == any(w in text for w in WORDS)
    assert MINIMAL_SCANNER.search(text) == any(w in text for w in WORDS)
    assert PACK.may_extract(text) == any(w in text for w in WORDS)


def test_scanner_finds_each_word_alone_and_inside_text():
    for w in WORDS:
        assert SCANNER.search(w), w
        assert SCANNER.search(f"é{w}\ud800"), w
    assert not SCANNER.search("")
    assert not SCANNER.search("step 12 loss 2.3131 lr 3.0e-04 grad_norm 0.213")
    assert "NCCL WARN" in PREFILTER_LITERALS and SCANNER.search("node-a01:1:2 [0] NCCL WARN x")


def test_the_minimal_literals_are_those_holding_no_other_one():
    # the pack's prefilter: every literal left out holds one kept, no kept one holds another
    assert 0 < len(MINIMAL) < len(set(WORDS))
    assert "Xid" in MINIMAL and "NVRM: Xid" in WORDS and "NVRM: Xid" not in MINIMAL
    for w in set(WORDS) - set(MINIMAL):
        assert any(m in w for m in MINIMAL), w
    for m in MINIMAL:
        assert not any(o != m and o in m for o in MINIMAL), m
    assert minimal_literals(["abc", "b", "xbx", "", "b", "cd"]) == ("b", "cd")
    assert minimal_literals([]) == () and minimal_literals([""]) == ()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet="ab\n", min_size=1, max_size=4), max_size=6),
       st.text(alphabet="abc\n", max_size=40))
def test_minimal_literals_mark_the_same_lines(words, text):
    """The bundle reader marks a line when a literal ends inside it: the same lines with the
    minimal set."""
    words = [w for w in words if "\n" not in w]

    def marked(ws):
        data = text.encode()
        ends = LiteralSet(ws).match_ends(data) if ws else []
        return {data[:e].count(b"\n") for e in ends}

    assert marked(minimal_literals(words)) == marked(words)
    assert marked(words) == {i for i, line in enumerate(text.split("\n")) if any(w in line for w in words)}


def test_an_empty_set_matches_nothing_and_an_empty_literal_is_refused():
    assert not LiteralSet([]).search("anything")
    with pytest.raises(ValueError, match="empty literal"):
        LiteralSet(["ok", ""])


def test_threads_scan_with_their_own_scratch():
    texts = [f"line {i} " + (WORDS[i % len(WORDS)] if i % 3 == 0 else "plain") for i in range(3000)]
    want = [any(w in t for w in WORDS) for t in texts]
    got: dict[int, list[bool]] = {}

    def scan(k: int) -> None:
        got[k] = [SCANNER.search(t) for t in texts]

    threads = [threading.Thread(target=scan, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(got[k] == want for k in range(4))


conditions = st.lists(st.builds(Condition, st.sampled_from(["a", "b", "c"]), st.sampled_from(sorted(Condition.OPS)),
                                st.sampled_from([0.0, 1.0, -1.0, 2.5])), max_size=3).map(tuple)
metrics = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.sampled_from([0.0, 1.0, -1.0, 2.5, 3.0]))


@settings(max_examples=600, deadline=None)
@given(conditions, conditions, conditions, metrics)
@pytest.mark.slow
def test_precompiled_conditions_hold_as_conditions_do(when, when_any, unless, metric):
    rule = Rule(id="t", version=1, source="test", file="t.yaml", kind="telemetry", event="gpu.ecc",
                events=("gpu.ecc",), when=when, when_any=when_any, unless_metric=unless)
    want = (all(c.holds(metric) for c in when)
            and (not when_any or any(c.holds(metric) for c in when_any))
            and not any(c.holds(metric) for c in unless))
    assert _passes(_gates(rule), metric) == want
