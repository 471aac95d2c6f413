"""The edge prefilter: a connector publishes only the log records the rule pack could turn into
an event, and counts the rest, so the stream's coverage stays exact.

Contract::

    EdgePrefilter(pack=None).keep(text)    # a RulePack's verdict on one record (default: the packaged one)
    EdgeTotals(...)                        # records / bytes read and published, one source or all
    EdgeTotals.summary() -> str            # "read 12.3 MB in 100000 records, published ..."

``keep`` is :meth:`correlators.rules.RulePack.may_extract`: True when the record (all its
lines, joined with ``\\n``, as the Observation body would hold it) contains one of the pack's
``prefilter_keywords`` -- a rule keyword or an error-severity literal of
:mod:`correlators.unrecognised`. A record it drops yields no event and no ``log.unrecognised``
event in either driver, since ``RulePack.extract`` applies the same test first; so the events
of the kept records, with their ids, are the events of all records, provided the records are
whole (a connector filters after grouping multi-line records, never line by line) and keep
the positions and times they had in the file.

What a dropped record still changes downstream is coverage (how many records a source had,
which hosts were read and silent): the connector counts dropped records and publishes them in
its coverage records (:meth:`connectors.files.FilesConnector.coverage`). Raw-record sinks (an
archive of every observation) see only the kept records: archival reads run without it.
"""

from __future__ import annotations

from dataclasses import dataclass

from correlators.rules import RulePack, load_rule_pack

__all__ = ["EdgePrefilter", "EdgeTotals"]


class EdgePrefilter:
    """The rule pack's keep/drop test for whole log records.

    ``pack``: the :class:`~correlators.rules.RulePack` the workers extract with (default: the
    packaged pack, :func:`correlators.rules.load_rule_pack`). ``ruleset``: its version, stated
    in the coverage so a prefilter built from another pack than the worker's is visible.
    Raises the loader's ``RuleError`` when the default pack cannot be loaded."""

    def __init__(self, pack: RulePack | None = None) -> None:
        self.pack = pack if pack is not None else load_rule_pack()
        self.ruleset: str = self.pack.version

    def keep(self, record_text: str) -> bool:
        """True when the record ``record_text`` (lines joined with ``\\n``) could yield an
        event or an unrecognised-error event; False when the rule pack extracts nothing from
        it. Pure."""
        return self.pack.may_extract(record_text)


def _size(n: int) -> str:
    for unit, step in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= step:
            return f"{n / step:.1f} {unit}"
    return f"{n} B"


@dataclass
class EdgeTotals:
    """What a connector read and published: ``records_read`` (every non-blank record, kept
    or not), ``records_published``, ``records_dropped`` (by the prefilter), ``bytes_read``
    (file bytes of every record, blank lines included) and ``bytes_published`` (file bytes of
    the published records). Bytes are the records' bytes in the file, newlines included."""

    records_read: int = 0
    records_published: int = 0
    records_dropped: int = 0
    bytes_read: int = 0
    bytes_published: int = 0

    def __add__(self, other: EdgeTotals) -> EdgeTotals:
        return EdgeTotals(*(a + b for a, b in zip(self.as_tuple(), other.as_tuple())))

    def as_tuple(self) -> tuple[int, int, int, int, int]:
        """The five counts in field order."""
        return (self.records_read, self.records_published, self.records_dropped, self.bytes_read,
                self.bytes_published)

    @property
    def saved(self) -> float:
        """Share of the bytes read that were not published (0.0 .. 1.0; 0.0 when none read)."""
        return 1.0 - self.bytes_published / self.bytes_read if self.bytes_read else 0.0

    def summary(self) -> str:
        """One line: ``read 12.3 MB in 100000 records, published 45.1 kB in 30 records
        (99.64% of bytes saved, 99970 records dropped at the edge)``."""
        return (f"read {_size(self.bytes_read)} in {self.records_read} records, published "
                f"{_size(self.bytes_published)} in {self.records_published} records "
                f"({100 * self.saved:.2f}% of bytes saved, {self.records_dropped} records dropped at the edge)")
