"""``streams.codec.decode_record``: the reason a record is dead-lettered names what is wrong
(``schemas.deadletter.reason_of``)."""

from __future__ import annotations

import json

from schemas.deadletter import reason_of
from streams.codec import decode_record


def test_a_record_missing_fields_names_them() -> None:
    reason = decode_record(json.dumps({"schema_version": 2, "body": "x"}).encode(), None)
    assert reason.startswith("invalid record: field 'source': Field required; field 'kind': Field required; ")
    assert reason.endswith("more)")


def test_an_out_of_range_time_names_its_field() -> None:
    from connectors.publish import bundle_records
    from pathlib import Path

    bundle = Path(__file__).resolve().parents[2] / "examples" / "incidents" / "public-rc15-pcie-aer-xid79-multinode"
    good = json.loads(bundle_records(bundle)[0][1].model_dump_json())
    reason = decode_record(json.dumps({**good, "observed_at": 2**70}).encode(), None)
    assert reason.startswith("invalid record: field 'observed_at': Input should be less than or equal to"), reason


def test_bytes_that_are_not_utf8_are_said_to_be_so() -> None:
    assert decode_record(b"\xff\xfe\x00garbage\x80", None) == "invalid json: not UTF-8: invalid start byte at byte 0"
    assert decode_record(b"{not json", None).startswith("invalid json: Expecting property name")
    assert decode_record(b"[" * 100_000, None) == "invalid json: nested too deeply"
    assert decode_record(b"x" * 11, 10) == "too large: 11 bytes > 10"


def test_reason_of_other_exceptions_is_their_first_line_or_class() -> None:
    assert reason_of(ValueError("first\nsecond")) == "first"
    assert reason_of(KeyError()) == "KeyError"
    assert len(reason_of(ValueError("x" * 1000))) == 300
