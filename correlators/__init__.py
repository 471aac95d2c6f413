"""faultstream's engine: pure, synchronous, deterministic correlation and attribution.

Nothing in this package imports Kafka, Faust, ClickHouse or does I/O beyond reading its own
packaged rule files. ``streams/`` (Faust agents) and the replay driver are thin drivers of it;
the same events give byte-identical verdicts through either.
"""

ENGINE_VERSION = "0.1.0"
