"""The agents' offset continuity guard (streams/offsets.py): a jump past offsets not handed
over asks for a seek back to the first one left out, once per gap (again after RESEEK_AFTER
records), records read again after the seek fill it, and a new generation starts afresh."""

from __future__ import annotations

from streams.offsets import MAX_AHEAD, RESEEK_AFTER, ContinuityGuard


def test_consecutive_offsets_ask_for_nothing() -> None:
    guard = ContinuityGuard()
    assert [guard.seen("obs-1", o, 3) for o in range(100, 110)] == [None] * 10
    assert guard.gaps == 0 and guard.missing("obs-1") == 0


def test_a_jump_seeks_back_to_the_first_offset_left_out_and_the_re_read_fills_it() -> None:
    guard = ContinuityGuard()
    for o in range(473, 485):
        assert guard.seen("obs-1", o, 3) is None
    assert guard.seen("obs-1", 493, 3) == 485  # 485..492 were never handed over
    assert guard.missing("obs-1") == 8
    # the records already queued behind 493 do not ask again: the seek is on its way
    assert [guard.seen("obs-1", o, 3) for o in range(494, 505)] == [None] * 11
    # read again from 485 after the seek: the gap fills, 493..504 are repeats
    assert [guard.seen("obs-1", o, 3) for o in range(485, 505)] == [None] * 20
    assert guard.missing("obs-1") == 0 and guard.gaps == 1
    # a second gap later in the same partition is a new one
    assert guard.seen("obs-1", 507, 3) == 505
    assert guard.gaps == 2


def test_a_gap_partly_filled_is_the_same_gap_and_repeats_do_not_count() -> None:
    guard = ContinuityGuard()
    guard.seen("obs-1", 0, 1)
    assert guard.seen("obs-1", 10, 1) == 1
    assert [guard.seen("obs-1", o, 1) for o in (1, 2)] == [None, None]  # the re-read starts
    assert guard.seen("obs-1", 11, 1) == 3  # it stopped at 3: seek again, the same gap
    assert guard.gaps == 1 and guard.missing("obs-1") == 7
    # the same record handed over again and again is not progress past the gap
    assert all(guard.seen("obs-1", 11, 1) is None for _ in range(2 * RESEEK_AFTER))


def test_a_record_of_an_earlier_generation_changes_nothing() -> None:
    guard = ContinuityGuard()
    guard.seen("obs-1", 10, 5)
    assert guard.seen("obs-1", 15, 5) == 11
    assert guard.seen("obs-1", 3, 4) is None  # stale, handed over late
    assert guard.missing("obs-1") == 4  # the open gap stays open


def test_a_gap_that_stays_open_asks_again_after_reseek_after_records() -> None:
    guard = ContinuityGuard()
    guard.seen("wl-2", 10, 1)
    assert guard.seen("wl-2", 12, 1) == 11
    asks = [guard.seen("wl-2", o, 1) for o in range(13, 13 + RESEEK_AFTER)]
    assert asks[:-1] == [None] * (RESEEK_AFTER - 1) and asks[-1] == 11
    assert guard.gaps == 1  # the same gap, asked again


def test_partitions_and_generations_are_apart() -> None:
    guard = ContinuityGuard()
    guard.seen("obs-1", 5, 3)
    guard.seen("obs-2", 900, 3)
    assert guard.seen("obs-2", 901, 3) is None
    assert guard.seen("obs-1", 9, 3) == 6
    # after a rebalance the partition starts again wherever the new generation reads first
    assert guard.seen("obs-1", 2, 4) is None and guard.seen("obs-1", 3, 4) is None
    assert guard.missing("obs-1") == 0
    guard.reset()
    assert guard.seen("obs-1", 40, 4) is None and guard.missing("obs-1") == 0


def test_a_gap_that_never_fills_is_not_held_forever() -> None:
    guard = ContinuityGuard()
    guard.seen("obs-1", 0, 1)
    assert guard.seen("obs-1", 2, 1) == 1
    for o in range(3, MAX_AHEAD + 3):
        guard.seen("obs-1", o, 1)
    # past MAX_AHEAD offsets ahead the partition starts again at the newest offset, counted
    assert guard.missing("obs-1") == 0 and guard.abandoned == 1
    assert guard.seen("obs-1", MAX_AHEAD + 3, 1) is None


def test_a_generation_seeked_to_its_committed_offset_sees_a_gap_at_its_start() -> None:
    guard = ContinuityGuard()
    guard.start("wl-1", 40, 5)  # the consumer was seeked to the committed offset 40
    # the first record handed over is 43: 40..42 were left out
    assert guard.seen("wl-1", 43, 5) == 40
    assert guard.missing("wl-1") == 3
    for offset in (40, 41, 42):
        assert guard.seen("wl-1", offset, 5) is None
    assert guard.missing("wl-1") == 0 and guard.seen("wl-1", 44, 5) is None
    # without a start the first record sets it, as before
    other = ContinuityGuard()
    assert other.seen("wl-1", 43, 5) is None and other.missing("wl-1") == 0


def test_a_start_does_not_move_a_partition_followed_in_its_generation() -> None:
    guard = ContinuityGuard()
    guard.start("wl-1", 40, 5)
    assert guard.seen("wl-1", 40, 5) is None and guard.seen("wl-1", 41, 5) is None
    guard.start("wl-1", 40, 5)  # the same generation again: where it is stays
    assert guard.seen("wl-1", 42, 5) is None and guard.missing("wl-1") == 0
    guard.start("wl-1", 10, 4)  # an earlier generation's start: no bearing
    assert guard.seen("wl-1", 43, 5) is None
    guard.start("wl-1", 30, 6)  # a new generation starts where it was seeked
    assert guard.seen("wl-1", 31, 6) == 30


def test_open_gaps_name_where_to_read_again() -> None:
    guard = ContinuityGuard()
    guard.start("wl-1", 40, 5)
    guard.seen("wl-1", 42, 5)  # 40 and 41 left out
    guard.seen("wl-2", 7, 5)
    guard.seen("wl-2", 8, 5)  # no gap
    assert guard.open_gaps() == {"wl-1": 40}
    guard.seen("wl-1", 40, 5)
    assert guard.open_gaps() == {"wl-1": 41}
    guard.seen("wl-1", 41, 5)
    assert guard.open_gaps() == {}
