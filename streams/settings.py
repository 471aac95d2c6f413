"""Worker settings, from the environment (``FAULTSTREAM_*``) or the CLI.

=================================  ===========================================  ==============
variable                           meaning                                      default
=================================  ===========================================  ==============
FAULTSTREAM_APP_ID                 Faust app id = consumer group and the         faultstream-worker
                                   prefix of internal (changelog) topics
FAULTSTREAM_TOPIC_PREFIX           prefix of the public topics                   faultstream
FAULTSTREAM_STORE                  table store: ``rocksdb://`` (durable, needs   rocksdb:// when
                                   rocksdict) or ``memory://`` (rebuilt from      rocksdict is
                                   the changelog at start)                       installed
FAULTSTREAM_DATA_DIR               Faust data dir (RocksDB files)                .state/faust
FAULTSTREAM_CLICKHOUSE             ``chdb://DIR`` / ``http(s)://...``; empty:     empty
                                   no ClickHouse writes
FAULTSTREAM_ALLOWED_LATENESS_S     watermark lateness (s)                        30
FAULTSTREAM_IDLE_TIMEOUT_S         live mode: close a window idle this long      10
FAULTSTREAM_FABRIC_FLUSH_S          re-decide a cluster's fabric at most this often  2
                                   (s); later records wait for the flush tick
                                   (wall-clock s); 0 disables
FAULTSTREAM_PROVISIONAL_INTERVAL_S a workload's provisional verdicts at most      5
                                   once per this many s (the first at once, a
                                   final never held); 0: every change
FAULTSTREAM_PARTITIONS             partitions of the internal topics             12
FAULTSTREAM_WEB_PORT               port of /metrics and health                   6066
FAULTSTREAM_WEB_BIND               address they listen on (0.0.0.0 in a pod)      127.0.0.1
FAULTSTREAM_GROUP_INSTANCE_ID      static consumer-group member id (the pod      none
                                   name): a restart takes its partitions back
FAULTSTREAM_REPLICATION_FACTOR     of the topics the worker declares             1
FAULTSTREAM_MAX_MESSAGE_BYTES      larger observations are dead-lettered         1048576
FAULTSTREAM_SHUTDOWN_TIMEOUT_S     after SIGTERM/SIGINT, exit without           30
                                   committing if the stop takes longer (s)
FAULTSTREAM_PRODUCER_LINGER_MS     the producer waits this long to fill a        5
                                   batch (ms); 0 sends each record at once
FAULTSTREAM_FETCH_MAX_WAIT_MS      the broker holds an empty fetch of the        50
                                   worker's consumer this long (ms)
FAULTSTREAM_REMEDIATION            remediation agents (streams/remediation/agent.py:     true
                                   proposals, commands, certifications,
                                   executors; FAULTSTREAM_REMEDIATION_* and
                                   FAULTSTREAM_EXECUTOR_* configure them)
FAULTSTREAM_ALERTS_URL             Alertmanager to post verdicts to as alerts    none (off)
                                   (streams/alerts.py; FAULTSTREAM_ALERTS_*
                                   configure them)
=================================  ===========================================  ==============

Kafka connection and security settings are ``KAFKA_*`` (``sinks/kafka_settings.py``).
Durations and counts are checked (``pydantic.ValidationError``): no negative lateness, idle
timeout or flush interval; at least one partition; a port in 1..65535.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from schemas.topics import DEFAULT_PREFIX, clean_prefix


def _default_store() -> str:
    return "rocksdb://" if importlib.util.find_spec("rocksdict") else "memory://"


class WorkerSettings(BaseSettings):
    """See the module docstring."""

    model_config = SettingsConfigDict(env_prefix="FAULTSTREAM_", extra="ignore")

    app_id: str = "faultstream-worker"
    topic_prefix: str = DEFAULT_PREFIX
    store: str = _default_store()
    data_dir: Path = Path(".state/faust")
    clickhouse: str = ""
    allowed_lateness_s: float = Field(30.0, ge=0, allow_inf_nan=False)
    idle_timeout_s: float = Field(10.0, ge=0, allow_inf_nan=False)
    #: the fabric correlator re-decides a cluster at most once per this many seconds; records
    #: arriving sooner are decided together by the next flush tick
    fabric_flush_s: float = Field(2.0, ge=0, allow_inf_nan=False)
    #: a workload's provisional verdicts are published at most once per this many seconds (the
    #: first at once; the latest content held back comes at the next tick, a final verdict
    #: is never held), and only when what they say changed; 0: every change is published
    provisional_interval_s: float = Field(5.0, ge=0, allow_inf_nan=False)
    partitions: int = Field(12, ge=1)
    web_port: int = Field(6066, ge=1, le=65535)
    #: the address /metrics and the health pages listen on (0.0.0.0 in a pod, for scraping)
    web_bind: str = "127.0.0.1"
    #: a stable member id in the consumer group (Kafka static membership: a restarted pod
    #: takes its partitions back without a rebalance); None: dynamic membership
    group_instance_id: str | None = None
    #: replication factor of the topics the worker declares (its changelogs and internal
    #: topics); 1 for a single broker
    replication_factor: int = Field(1, ge=1)
    max_message_bytes: int = Field(1_048_576, ge=1)
    #: after SIGTERM/SIGINT the worker exits without committing if its stop takes longer
    shutdown_timeout_s: float = Field(30.0, gt=0, allow_inf_nan=False)
    remediation: bool = True
    #: the worker's producer batches the records of this many milliseconds into one request
    #: (Kafka's ``linger.ms``); each internal hop adds at most this much latency
    producer_linger_ms: float = Field(5.0, ge=0, le=1000, allow_inf_nan=False)
    #: the broker holds a fetch of the worker's consumer that has no data this long (Faust's
    #: own value, 1,500 ms, adds up to 1.5 s per internal hop; streams.faust_transport)
    fetch_max_wait_ms: int = Field(50, ge=0, le=60_000)

    @field_validator("topic_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        return clean_prefix(value)

    def topic(self, name: str) -> str:
        """Public topic ``name`` (``observations``, ``events``, ...) under the prefix."""
        return f"{self.topic_prefix}.{name}"

    def channel_topic(self, channel: str) -> str:
        """The internal topic of a pipeline channel (``workload``, ``host``, ``fabric``):
        ``<app_id>-by-<channel>``."""
        return f"{self.app_id}-by-{channel}"
