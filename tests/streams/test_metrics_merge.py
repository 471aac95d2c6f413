"""``streams.metrics.merge_expositions``: the worker's ``/metrics`` page is its own metrics and
its ingest stage's (a child process) as one valid exposition: one family per name, samples of
the same name and labels added."""

from __future__ import annotations

import pytest
from prometheus_client import Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from streams.metrics import Metrics, merge_expositions


def samples(text: bytes) -> dict[tuple, float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text.decode()) for s in family.samples}


def test_two_processes_metrics_are_one_exposition_with_their_sums():
    worker, ingest = Metrics(), Metrics()
    worker.dead_letters.labels("invalid message").inc(2)
    worker.lag.labels("fs-by-workload", "0").set(7)
    ingest.observations.inc(1000)
    ingest.processed.inc(998)
    ingest.dead_letters.labels("invalid json").inc(2)
    worker.dead_letters.labels("invalid json").inc(1)
    batch = Histogram("faultstream_ingest_batch_seconds", "one batch", registry=ingest.registry)
    batch.observe(0.2)
    batch.observe(3.0)

    merged = merge_expositions(generate_latest(worker.registry).decode(), generate_latest(ingest.registry).decode())
    got = samples(merged)
    assert got[("faultstream_observations_total", ())] == 1000
    assert got[("faultstream_observations_processed_total", ())] == 998
    assert got[("faultstream_dead_letters_total", (("reason", "invalid json"),))] == 3
    assert got[("faultstream_dead_letters_total", (("reason", "invalid message"),))] == 2
    assert got[("faultstream_consumer_lag", (("partition", "0"), ("topic", "fs-by-workload")))] == 7
    assert got[("faultstream_ingest_batch_seconds_count", ())] == 2
    assert got[("faultstream_ingest_batch_seconds_bucket", (("le", "0.25"),))] == 1
    assert got[("faultstream_ingest_batch_seconds_sum", ())] == pytest.approx(3.2)
    # one TYPE line per family: a valid exposition
    types = [line.split()[2] for line in merged.decode().splitlines() if line.startswith("# TYPE ")]
    assert len(types) == len(set(types))
    # creation times are not added: the earliest stays
    created = ("faultstream_dead_letters_created", (("reason", "invalid json"),))
    assert got[created] == min(samples(generate_latest(r.registry))[created] for r in (worker, ingest))


def test_a_text_that_is_not_an_exposition_is_refused():
    with pytest.raises(ValueError):
        merge_expositions(generate_latest(Metrics().registry).decode(), "faultstream_observations_total one\n")
