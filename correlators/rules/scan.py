"""Whether a text holds any literal of a set, in one compiled pass (pure: no I/O).

:class:`LiteralSet` is the extraction engine's prefilter: a log record that holds none of
the rule pack's keywords and none of the error-severity literals yields no event, so
``RulePack.extract`` stops after one test. The set is compiled once with Hyperscan's literal
compiler (Intel Hyperscan, ``hs_compile_lit_multi``, through the ``hyperscan`` bindings;
Vectorscan on aarch64): one scan of the record's UTF-8 bytes whatever the number of literals,
about a microsecond for a 150-character line where Python's ``re`` took twelve (a trie of
the literals as one regex; measured on bench/stream.py's lines).

Matching is exact, case-sensitive substring matching: ``LiteralSet(words).search(text)`` is
``any(w in text for w in words)`` for every ``str`` (UTF-8 is self-synchronising, so a
literal occurs in the bytes exactly where it occurs in the text; lone surrogates, which JSON
can carry, are encoded with ``surrogatepass``).

:meth:`LiteralSet.match_ends` scans a whole block of text (many lines, UTF-8 bytes) in one
pass and reports where each occurrence ends: the readers' batch front end maps them to line
numbers, so a line holding no literal never becomes a Python object (``bench/history.py``).
:func:`minimal_literals` drops the literals that hold another one, which such a prefilter
never needs.
"""

from __future__ import annotations

import threading
from typing import Iterable

import ahocorasick
import hyperscan

__all__ = ["LiteralSet", "minimal_literals"]


def minimal_literals(words: Iterable[str]) -> tuple[str, ...]:
    """The literals of ``words`` that hold no other one of them, sorted, empty strings left
    out: a text holds one of these exactly when it holds one of ``words`` (a literal holding
    another is found through it), and a line holds one exactly when it holds one of ``words``.
    What a prefilter asks (any literal?) with fewer literals to compile and fewer matches to
    report: the rule pack's 1,121 prefilter literals are 662. One Aho-Corasick pass
    (pyahocorasick) per literal."""
    unique = sorted({w for w in words if w})
    automaton = ahocorasick.Automaton()
    for w in unique:
        automaton.add_word(w, w)
    if not unique:
        return ()
    automaton.make_automaton()
    return tuple(w for w in unique if all(found == w for _, found in automaton.iter(w)))


def _ended(_id: int, _start: int, end: int, _flags: int, ends: list[int]) -> None:
    ends.append(end)


def _found(_id: int, _start: int, _end: int, _flags: int, hits: list[int]) -> bool:
    hits.append(_id)
    return True  # one match answers the question: stop the scan


class LiteralSet:
    """A compiled set of literals. ``words``: the literals (empty strings are refused: every
    text would hold one). Raises ``ValueError`` for an empty literal. Each way of scanning
    compiles its own Hyperscan database on first use (:meth:`search`: stop at the first match;
    :meth:`match_ends`: every match), so a reader that only scans blocks compiles one. Safe to
    share between threads: compiles are locked, and each thread scans with its own scratch
    space."""

    def __init__(self, words: Iterable[str]) -> None:
        self.words: tuple[str, ...] = tuple(sorted(set(words)))
        if any(not w for w in self.words):
            raise ValueError("an empty literal matches every text")
        self._local = threading.local()
        self._first_db: hyperscan.Database | None = None  # stops at the first match, for search
        self._all_db: hyperscan.Database | None = None  # every match, for match_ends
        self._lock = threading.Lock()

    def _compile(self, attr: str, flags: int) -> hyperscan.Database:
        """The database held in ``attr``, compiled with ``flags`` the first time."""
        db = getattr(self, attr)
        if db is None:
            with self._lock:
                db = getattr(self, attr)
                if db is None:
                    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
                    db.compile(expressions=[w.encode("utf-8", "surrogatepass") for w in self.words],
                               ids=list(range(len(self.words))), flags=flags, literal=True)
                    setattr(self, attr, db)
        return db

    def search(self, text: str) -> bool:
        """True when ``text`` holds at least one of :attr:`words`."""
        if not self.words or not text:
            return False
        db = self._first_db if self._first_db is not None else self._compile("_first_db", hyperscan.HS_FLAG_SINGLEMATCH)
        local = self._local
        scratch = getattr(local, "scratch", None)
        if scratch is None:
            scratch = local.scratch = hyperscan.Scratch(db)
        hits: list[int] = []
        try:
            db.scan(text.encode("utf-8", "surrogatepass"), match_event_handler=_found,
                    context=hits, scratch=scratch)
        except hyperscan.ScanTerminated:
            pass
        return bool(hits)

    def match_ends(self, data: bytes) -> list[int]:
        """End offsets (exclusive, in bytes of ``data``) of every occurrence of every literal
        in ``data``, in the order Hyperscan reports them (non-decreasing end); an offset
        appears once per literal ending there. ``data``: UTF-8 text, any number of lines.
        A block with many occurrences costs one Python call each."""
        if not self.words or not data:
            return []
        db = self._all_db if self._all_db is not None else self._compile("_all_db", 0)
        local = self._local
        scratch = getattr(local, "all_scratch", None)
        if scratch is None:
            scratch = local.all_scratch = hyperscan.Scratch(db)
        ends: list[int] = []
        db.scan(data, match_event_handler=_ended, context=ends, scratch=scratch)
        return ends
