"""Prometheus metrics of one worker process, shared by its Faust agents and its batch ingest
stage (:mod:`streams.ingest`): one registry, served at ``/metrics``."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest


class Metrics:
    """Prometheus metrics of one worker process (served at ``/metrics``)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.observations = Counter("faultstream_observations_total", "observations consumed", registry=r)
        self.processed = Counter("faultstream_observations_processed_total", "observations processed (not dead-lettered)", registry=r)
        self.events = Counter("faultstream_events_total", "events extracted", ["type"], registry=r)
        self.dead_letters = Counter("faultstream_dead_letters_total", "inputs dead-lettered", ["reason"], registry=r)
        self.verdicts = Counter("faultstream_verdicts_total", "verdicts emitted", ["domain", "kind"], registry=r)
        self.open_windows = Gauge("faultstream_open_windows", "workload windows not closed (sampled every 5 s)", registry=r)
        self.lag = Gauge("faultstream_consumer_lag", "messages behind the high watermark", ["topic", "partition"], registry=r)
        self.offset_gaps = Counter("faultstream_offset_gaps_total", "seeks back over offsets an agent's stream "
                                   "left out, to read them again (streams/offsets.py)", ["topic"], registry=r)
        self.clickhouse_rows = Counter("faultstream_clickhouse_rows_total", "rows written", ["table"], registry=r)
        self.inputs = Counter("faultstream_agent_inputs_total", "records an agent read, by outcome "
                              "(processed | dead_lettered)", ["agent", "outcome"], registry=r)
        self.ingest_restarts = Counter("faultstream_ingest_restarts_total", "restarts of the whole worker's "
                                       "ingest child after it died (streams.app.IngestService)", registry=r)


def merge_expositions(*texts: str) -> bytes:
    """Several Prometheus text expositions (``generate_latest`` output of this worker's
    processes) as one: families of the same name are one family, samples of the same name
    and labels are added (counters, histogram buckets and sums, and gauges that one process
    alone sets), ``*_created`` timestamps keep the earliest. Parsing is the library's
    (``prometheus_client.parser``). Raises ``ValueError`` for a text that does not parse."""
    from prometheus_client.parser import text_string_to_metric_families
    from prometheus_client.samples import Sample

    families: dict[str, Any] = {}
    values: dict[str, dict[tuple, Sample]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            kept = families.setdefault(family.name, family)
            samples = values.setdefault(family.name, {})
            if kept is not family and not kept.documentation:
                kept.documentation = family.documentation
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                old = samples.get(key)
                if old is None:
                    samples[key] = sample
                elif sample.name.endswith("_created"):
                    samples[key] = old._replace(value=min(old.value, sample.value))
                else:
                    samples[key] = old._replace(value=old.value + sample.value)

    class Merged:
        def collect(self) -> Any:
            for name, family in families.items():
                family.samples = list(values[name].values())
                yield family

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Merged())  # type: ignore[arg-type]
    return generate_latest(registry)
