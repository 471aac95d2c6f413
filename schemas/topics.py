"""The topic catalogue: every Kafka topic faultstream reads or writes, and how to create them.

Public topics (logical name -> default full name; ``<prefix>`` is ``FAULTSTREAM_TOPIC_PREFIX``,
default ``faultstream``):

==============  ============================  ==============  ===================  ====  ========  ==========
logical         topic                         key             value                part  cleanup   retention
==============  ============================  ==============  ===================  ====  ========  ==========
observations    <prefix>.observations         host            Observation          12    delete    7 days
events          <prefix>.events               workload id     Event                12    delete    7 days
attributions    <prefix>.attributions         attribution_id  Attribution          12    compact   (latest)
remediations    <prefix>.remediations         action_id       RemediationAction    12    compact   (latest)
rem-commands    <prefix>.remediation-commands action_id       RemediationCommand   3     delete    30 days
deadletter      <prefix>.deadletter           source          DeadLetter           3     delete    30 days
topology        <prefix>.topology             cluster         TopologyObservation  3     compact   (latest)
certifications  <prefix>.certifications       host            Certification        12    delete    30 days
==============  ============================  ==============  ===================  ====  ========  ==========

Keys are UTF-8 strings, exactly (each :class:`TopicSpec` ``key`` says the same):

* observations: ``Observation.host`` (``node-a01``), so one host's lines stay in order;
* events: the workload id the event was routed to (``Event.workload_id`` once attached);
  ``host:<host>`` (``host:node-a01``) for an event no workload claims (yet);
* attributions: ``attribution_id`` = ``att-`` + 24 hex digits of BLAKE2b-96 over the canonical
  JSON of ``["workload", cluster, workload_id]``, ``["fabric_port", incident_id]`` or
  ``["incident", incident_id]`` (:func:`schemas.records.content_id`), so a compacted consumer
  keeps the latest revision of every verdict;
* remediations: ``action_id`` = ``act-`` + BLAKE2b-96 over ``[cluster, incident, target,
  action]`` (``incident`` the verdict's incident id, else its attribution id; ``target`` the
  RemediationTarget as JSON; ``notify`` and ``recertify`` add a reason tag);
* remediation-commands: the command's ``action_id``; the empty key for ``reset_breaker``;
* deadletter: the rejecting component's ``source`` (``stage.ingest``, ``agent.remediation``);
* topology: the cluster name; certifications: ``Certification.host``.

Values are the canonical JSON of the record model named in ``value_schema`` (``schemas.records``
/ ``schemas.deadletter``; JSON Schema files in ``schemas/json``), with the headers of
:mod:`schemas.wire`. ``observations`` and ``deadletter`` accept records up to 10 MiB
(``max.message.bytes``) so oversized bad input still reaches the dead-letter path.

Tombstones (a null value under a key; :attr:`TopicSpec.tombstones` says when, per topic):
``attributions`` -- right after a withdrawn verdict (status ``withdrawn``) of that key;
``topology`` -- ``faultstream connect topology --delete`` ends a cluster's topology. No other
topic carries them; one there is dead-lettered (``original: null``). Remediations are never
tombstoned: the terminal state of an action is its audit record.

The prefix exists so tests (and several deployments on one cluster) can use their own names:
``catalogue(prefix="t-1234")`` gives ``t-1234.observations`` etc. :data:`TOPICS` is the
catalogue for the prefix in the environment *at import time*; call :func:`catalogue` when the
prefix may change.

Faust's internal topics are derived from the app id, table and agent names
(:func:`faust_internal_topics`); Faust declares them itself, the function documents and predicts
their names (e.g. for ACLs, monitoring, or cleaning up after tests).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_PREFIX = "faultstream"
PREFIX_ENV = "FAULTSTREAM_TOPIC_PREFIX"

DAY_MS = 24 * 3600 * 1000
#: ``max.message.bytes`` of topics that must carry oversized bad input (bytes).
LARGE_MESSAGE_BYTES = 10 * 1024 * 1024
#: ``max.message.bytes`` of the dead-letter topic: an input of LARGE_MESSAGE_BYTES grows by a
#: third as base64 in its dead letter, plus the reason and position.
DEAD_LETTER_MESSAGE_BYTES = 16 * 1024 * 1024


class TopicSpec(BaseModel):
    """One topic: full ``name``; ``key`` (what the record key holds, exactly); ``value_schema``
    (the record model's class name, or None when the value format is not fixed yet);
    ``partitions``; ``cleanup_policy``; ``retention_ms`` (milliseconds, None = broker default /
    irrelevant for compacted topics); ``description``; ``publishers`` and ``consumers`` (who
    writes and who reads it, in words); ``tombstones`` (when a null value appears, "" never);
    ``extra_config`` (other topic configs)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    key: str
    value_schema: str | None
    partitions: int = Field(ge=1)
    cleanup_policy: Literal["delete", "compact"]
    retention_ms: int | None = None
    description: str = ""
    publishers: str = ""
    consumers: str = ""
    tombstones: str = ""
    extra_config: dict[str, str] = Field(default_factory=dict)

    def topic_config(self) -> dict[str, str]:
        """The Kafka topic configuration to create it with (string values, as the admin API
        wants)."""
        cfg = {"cleanup.policy": self.cleanup_policy}
        if self.retention_ms is not None:
            cfg["retention.ms"] = str(self.retention_ms)
        cfg.update(self.extra_config)
        return cfg


def clean_prefix(value: str | None) -> str:
    """A topic prefix as configured -> the prefix used: ``value`` without surrounding blanks,
    :data:`DEFAULT_PREFIX` when that leaves nothing (unset, ``""``, ``"  "``). Settings that
    read ``FAULTSTREAM_TOPIC_PREFIX`` themselves (``streams.settings.WorkerSettings``) pass
    their value through this, so every process names the same topics."""
    return (value or "").strip() or DEFAULT_PREFIX


def topic_prefix() -> str:
    """The topic prefix: :func:`clean_prefix` of ``FAULTSTREAM_TOPIC_PREFIX`` (the one reader
    of that variable), ``"faultstream"`` when unset or blank."""
    return clean_prefix(os.environ.get(PREFIX_ENV))


def topic_name(logical: str, prefix: str | None = None) -> str:
    """``<prefix>.<logical>``, e.g. ``topic_name("events") == "faultstream.events"``."""
    return f"{prefix or topic_prefix()}.{logical}"


def catalogue(prefix: str | None = None) -> dict[str, TopicSpec]:
    """The public topics keyed by logical name (``"observations"``, ...), named with ``prefix``
    (default :func:`topic_prefix`)."""
    p = prefix or topic_prefix()
    large = {"max.message.bytes": str(LARGE_MESSAGE_BYTES)}
    specs = [
        ("observations", TopicSpec(
            name=topic_name("observations", p), key="the observation's host (node-a01)",
            value_schema="Observation",
            partitions=12, cleanup_policy="delete", retention_ms=7 * DAY_MS, extra_config=large,
            description="normalised inputs from every connector; keyed by host so one host's "
                        "lines stay in order",
            publishers="connectors (faultstream connect ...)", consumers="the worker (ingest)",
        )),
        ("events", TopicSpec(
            name=topic_name("events", p),
            key="the workload id the event is routed to; host:<host> (host:node-a01) when no "
                "workload claims it",
            value_schema="Event",
            partitions=12, cleanup_policy="delete", retention_ms=7 * DAY_MS,
            description="typed facts extracted by rules, as extracted (before enrichment)",
            publishers="the worker (ingest)", consumers="dashboards, the ClickHouse sink",
        )),
        ("attributions", TopicSpec(
            name=topic_name("attributions", p),
            key="attribution_id: att- + 24 hex of BLAKE2b-96 over the canonical JSON of "
                "[\"workload\", cluster, workload_id], [\"fabric_port\", incident_id] or "
                "[\"incident\", incident_id]",
            value_schema="Attribution", partitions=12, cleanup_policy="compact",
            description="verdicts; every revision is published (status provisional, final or "
                        "withdrawn), compaction keeps the latest per scope",
            publishers="the worker (correlate)", consumers="the worker (remediation), "
                        "remediation systems, dashboards",
            tombstones="right after a withdrawn verdict of the key: the scope has no verdict",
        )),
        ("remediations", TopicSpec(
            name=topic_name("remediations", p),
            key="action_id: act- + 24 hex of BLAKE2b-96 over [cluster, incident, target, action]",
            value_schema="RemediationAction", partitions=12, cleanup_policy="compact",
            description="remediation actions, one record per lifecycle transition (sequence "
                        "increases, updated_at never decreases); compaction keeps the latest "
                        "state of every action",
            publishers="the worker (remediation)", consumers="executors, the CLI, dashboards",
        )),
        ("remediation-commands", TopicSpec(
            name=topic_name("remediation-commands", p),
            key="the command's action_id; the empty key for reset_breaker",
            value_schema="RemediationCommand", partitions=3, cleanup_policy="delete",
            retention_ms=30 * DAY_MS,
            description="approve / reject / cancel / reset-breaker decisions of people "
                        "(faultstream remediation ...), with who, when and why, signed",
            publishers="people, through faultstream remediation (the CLI)",
            consumers="the worker (remediation)",
        )),
        ("deadletter", TopicSpec(
            name=topic_name("deadletter", p),
            key="the rejecting component's source (stage.ingest, agent.remediation, ...)",
            value_schema="DeadLetter",
            partitions=3, cleanup_policy="delete", retention_ms=30 * DAY_MS,
            extra_config={"max.message.bytes": str(DEAD_LETTER_MESSAGE_BYTES)},
            description="input that could not be processed, with the reason and the original "
                        "bytes (schemas/deadletter.py)",
            publishers="the worker, connectors", consumers="operators, the ClickHouse sink",
        )),
        ("topology", TopicSpec(
            name=topic_name("topology", p), key="the cluster name",
            value_schema="TopologyObservation",
            partitions=3, cleanup_policy="compact",
            description="the fabric topology of a cluster (an Observation of kind 'topology' "
                        "whose attributes.topology is a TopologySpec), latest per cluster",
            publishers="faultstream connect topology", consumers="the worker (every process)",
            tombstones="faultstream connect topology --delete: the cluster's topology ends",
        )),
        ("certifications", TopicSpec(
            name=topic_name("certifications", p), key="the certified host (node-a01)",
            value_schema="Certification",
            partitions=12, cleanup_policy="delete", retention_ms=30 * DAY_MS,
            description="certification / re-validation results per host (NVCRE, dcgmi diag); "
                        "one that cannot apply is dead-lettered with the reason",
            publishers="faultstream connect certifications", consumers="the worker (remediation)",
        )),
    ]
    return dict(specs)


#: The catalogue for the prefix in the environment when this module was imported.
TOPICS: dict[str, TopicSpec] = catalogue()


def faust_internal_topics(
    app_id: str,
    tables: Iterable[str] = (),
    group_bys: Iterable[tuple[str, str, str]] = (),
    *,
    partitions: int = 12,
) -> list[TopicSpec]:
    """The internal topics a Faust app with id ``app_id`` declares (names as faust-streaming
    0.11+ derives them):

    * one changelog per table: ``<app_id>-<table>-changelog`` (compacted; partitions = the
      table's, which must equal its source topic's);
    * one repartition topic per ``stream.group_by(key, name=N)`` in an agent named ``A``
      consuming topic ``S``: ``<A>-<S>-<N>-repartition`` (``group_bys`` gives ``(A, S, N)``;
      ``A`` is the agent's name, by default its module-qualified function name, **not** the
      app id);
    * the leader-election topic ``<app_id>-__assignor-__leader`` (1 partition).

    ``partitions`` is used for changelogs and repartition topics (Faust's ``topic_partitions``).
    """
    out = [
        TopicSpec(
            name=f"{app_id}-__assignor-__leader", key="(faust internal)", value_schema=None,
            partitions=1, cleanup_policy="delete",
            description="Faust leader election among the app's workers",
        )
    ]
    for table in tables:
        out.append(TopicSpec(
            name=f"{app_id}-{table}-changelog", key="table key", value_schema=None,
            partitions=partitions, cleanup_policy="compact",
            description=f"changelog of Faust table {table!r} (state recovery after a restart)",
        ))
    for agent, source, suffix in group_bys:
        out.append(TopicSpec(
            name=f"{agent}-{source}-{suffix}-repartition", key=f"group_by key {suffix!r}",
            value_schema=None, partitions=partitions, cleanup_policy="delete",
            description=f"{source} re-keyed by {suffix} for agent {agent}",
        ))
    return out


def _wait_ready(admin, names: list[str], timeout_s: float):
    """Poll metadata until every topic in ``names`` is listed with a leader for each partition;
    return the metadata. Raises TimeoutError after ``timeout_s`` seconds."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        md = admin.list_topics(timeout=timeout_s)
        missing = [
            n for n in names
            if (t := md.topics.get(n)) is None or t.error is not None or not t.partitions
            or any(p.leader < 0 for p in t.partitions.values())
        ]
        if not missing:
            return md
        if time.monotonic() > deadline:
            raise TimeoutError(f"topics not ready after {timeout_s:g} s: {', '.join(missing)}")
        time.sleep(0.05)


class TopicMismatchError(RuntimeError):
    """Existing topics differ from the catalogue (partition count or cleanup policy).
    ``mismatches`` holds one line per difference; ``created`` the topics this call created."""

    def __init__(self, mismatches: list[str], created: list[str]) -> None:
        self.mismatches = mismatches
        self.created = created
        super().__init__("topics differ from the catalogue:\n  " + "\n  ".join(mismatches))


def create_topics(
    admin_config: Mapping[str, str],
    specs: Iterable[TopicSpec] | Mapping[str, TopicSpec],
    *,
    partitions_override: int | None = None,
    replication_factor: int = -1,
    timeout_s: float = 30.0,
) -> list[str]:
    """Create the topics of ``specs`` that do not exist yet; return the names created (in the
    given order). Idempotent: existing topics are left alone.

    ``admin_config`` is a confluent_kafka configuration (e.g.
    ``KafkaSettings().confluent_config()``); ``partitions_override`` replaces every spec's
    partition count (tests); ``replication_factor`` -1 means the broker's
    ``default.replication.factor``; ``timeout_s`` bounds each admin call, seconds.

    Returns only once the broker serves every topic of ``specs`` (a leader for each partition),
    so producers can use them at once.

    Raises :class:`TopicMismatchError` (after creating the missing ones) when an existing topic's
    partition count or ``cleanup.policy`` differs from the expected; ``confluent_kafka.
    KafkaException`` when the broker cannot be reached or refuses a creation; ``TimeoutError``
    when created topics do not get leaders within ``timeout_s``.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    spec_list = list(specs.values()) if isinstance(specs, Mapping) else list(specs)
    if not spec_list:
        return []
    admin = AdminClient(dict(admin_config))
    expected = {s.name: (partitions_override or s.partitions, s) for s in spec_list}

    new = [
        NewTopic(name, num_partitions=n, replication_factor=replication_factor, config=s.topic_config())
        for name, (n, s) in expected.items()
    ]
    futures = admin.create_topics(new, operation_timeout=timeout_s, request_timeout=timeout_s)
    created: list[str] = []
    existing: list[str] = []
    for name, fut in futures.items():
        try:
            fut.result(timeout=timeout_s + 5)
            created.append(name)
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                existing.append(name)
            else:
                raise
    created.sort(key=list(expected).index)
    # the controller has committed them; wait until the broker serves them (leaders elected)
    md = _wait_ready(admin, list(expected), timeout_s)

    mismatches: list[str] = []
    if existing:
        for name in existing:
            n_want = expected[name][0]
            t = md.topics.get(name)
            n_have = len(t.partitions) if t is not None else 0
            if n_have != n_want:
                mismatches.append(f"{name}: {n_have} partitions, catalogue wants {n_want}")
        resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in existing]
        for res, fut in admin.describe_configs(resources, request_timeout=timeout_s).items():
            have = fut.result(timeout=timeout_s + 5)["cleanup.policy"].value
            want = expected[res.name][1].cleanup_policy
            if have != want:
                mismatches.append(f"{res.name}: cleanup.policy={have}, catalogue wants {want}")
    if mismatches:
        raise TopicMismatchError(mismatches, created)
    return created
