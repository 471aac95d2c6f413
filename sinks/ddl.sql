-- faultstream ClickHouse schema. Applied by sinks.clickhouse.ClickHouseSink on every start;
-- every statement is idempotent (IF NOT EXISTS). `{database}` is replaced by the sink's
-- database name (an identifier checked against ^[A-Za-z_][A-Za-z0-9_]*$).
--
-- Conventions:
-- * every table is a ReplacingMergeTree keyed by the record's deterministic id, so duplicates
--   from at-least-once delivery / replays collapse under FINAL (or at merge time);
-- * attributions use `revision` and remediations `sequence` (one higher with every lifecycle
--   transition, schemas.records.RemediationAction) as the version column: the highest version
--   wins under FINAL; remediation_transitions keeps every transition (ORDER BY action_id,
--   sequence) -- the lifecycle as events;
-- * a `remediations` table of an older schema (version column `state_rank`, no `sequence`) is
--   renamed to `remediations_state_rank_<n>` by the sink before these statements run;
-- * times are DateTime64(9, 'UTC') -- nanoseconds since the epoch, UTC;
-- * `record` holds the full canonical JSON of the record (schemas.records.canonical_json),
--   so nothing is lost; the typed columns are for dashboards and filters;
-- * `non_replicated_deduplication_window` makes plain (non-replicated) MergeTree honour
--   insert deduplication (block hashes and `insert_deduplication_token`) for the last N
--   inserted blocks; Replicated/Shared MergeTree on a server deduplicate by default.
--   Statements are separated by a line holding only ';'.

CREATE DATABASE IF NOT EXISTS {database}
;
CREATE TABLE IF NOT EXISTS {database}.observations
(
    observation_id   String,
    schema_version   UInt16,
    kind             LowCardinality(String),
    observed_at      DateTime64(9, 'UTC'),
    time_source      LowCardinality(String),
    time_quality     Float32,
    host             LowCardinality(String),
    cluster          LowCardinality(String),
    workload_id      Nullable(String),
    rank             Nullable(Int32),
    gpu_index        Nullable(Int32),
    gpu_pci_bus_id   Nullable(String),
    gpu_uuid         Nullable(String),
    fabric_port      Nullable(String),
    source_connector LowCardinality(String),
    source_instance  String,
    format           LowCardinality(String),
    position_file    Nullable(String),
    position_line    Nullable(Int64),
    record           String CODEC(ZSTD(3)),
    inserted_at      DateTime64(3, 'UTC') DEFAULT now64(3),
    -- the record's body and whether it carries a metric, for replay's push-down of the rule
    -- pack's prefilter (sinks.clickhouse.ClickHouseSink.observation_records, body_any)
    body             String MATERIALIZED JSONExtractString(record, 'body') CODEC(ZSTD(3)),
    has_metric       Bool MATERIALIZED JSONExtractRaw(record, 'metric') NOT IN ('', 'null'),
    INDEX idx_host host TYPE bloom_filter GRANULARITY 4,
    INDEX idx_workload workload_id TYPE bloom_filter GRANULARITY 4,
    INDEX idx_observed_at observed_at TYPE minmax GRANULARITY 1
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(observed_at)
ORDER BY (observation_id)
SETTINGS non_replicated_deduplication_window = 10000
;
-- tables made before the push-down columns: added, computed from `record` for the parts
-- already written (on read until the parts merge, or ALTER TABLE ... MATERIALIZE COLUMN)
ALTER TABLE {database}.observations
    ADD COLUMN IF NOT EXISTS body String MATERIALIZED JSONExtractString(record, 'body') CODEC(ZSTD(3)),
    ADD COLUMN IF NOT EXISTS has_metric Bool MATERIALIZED JSONExtractRaw(record, 'metric') NOT IN ('', 'null')
;
CREATE TABLE IF NOT EXISTS {database}.events
(
    event_id         String,
    schema_version   UInt16,
    type             LowCardinality(String),
    at               DateTime64(9, 'UTC'),
    began_at         Nullable(DateTime64(9, 'UTC')),
    effective_at     DateTime64(9, 'UTC'),
    time_quality     Float32,
    host             LowCardinality(String),
    cluster          LowCardinality(String),
    workload_id      Nullable(String),
    rank             Nullable(Int32),
    gpu_index        Nullable(Int32),
    gpu_pci_bus_id   Nullable(String),
    gpu_uuid         Nullable(String),
    fabric_port      Nullable(String),
    peer             Nullable(String),
    xid              Nullable(Int32),
    rule             LowCardinality(String),
    observation_ids  Array(String),
    record           String CODEC(ZSTD(3)),
    inserted_at      DateTime64(3, 'UTC') DEFAULT now64(3),
    INDEX idx_host host TYPE bloom_filter GRANULARITY 4,
    INDEX idx_workload workload_id TYPE bloom_filter GRANULARITY 4,
    INDEX idx_at at TYPE minmax GRANULARITY 1
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(at)
ORDER BY (event_id)
SETTINGS non_replicated_deduplication_window = 10000
;
CREATE TABLE IF NOT EXISTS {database}.attributions
(
    attribution_id      String,
    revision            UInt32,
    schema_version      UInt16,
    scope_kind          LowCardinality(String),
    scope_id            String,
    cluster             LowCardinality(String),
    window_start        DateTime64(9, 'UTC'),
    window_end          DateTime64(9, 'UTC'),
    outcome             LowCardinality(String),
    domain              LowCardinality(String),
    root_cause_code     LowCardinality(String),
    root_cause_text     String,
    root_cause_event_id Nullable(String),
    culprit_hosts       Array(String),
    culprit_ranks       Array(Int32),
    culprit_gpus        Array(String),
    culprit_ports       Array(String),
    affected_hosts      Array(String),
    affected_ranks      Array(Int32),
    affected_workloads  Array(String),
    symptom_count       UInt32,
    confidence          Float64,
    quality             LowCardinality(String),
    status              LowCardinality(String),
    gpu_hours_lost      Nullable(Float64),
    node_hours_lost     Nullable(Float64),
    ran_after_cause_s   Nullable(Float64),
    verdict_after_s     Nullable(Float64),
    jobs_hit            UInt32,
    nodes_hit           UInt32,
    goodput_lost_fraction   Nullable(Float64),
    gpu_hours_lost_per_hour Nullable(Float64),
    alternative_codes   Array(String),
    coverage_problems   Array(String),
    incident_id         Nullable(String),
    ruleset_version     LowCardinality(String),
    engine_version      LowCardinality(String),
    decided_at          DateTime64(9, 'UTC'),
    record              String CODEC(ZSTD(3)),
    inserted_at         DateTime64(3, 'UTC') DEFAULT now64(3),
    INDEX idx_scope scope_id TYPE bloom_filter GRANULARITY 4,
    INDEX idx_culprit_hosts culprit_hosts TYPE bloom_filter GRANULARITY 4,
    INDEX idx_decided_at decided_at TYPE minmax GRANULARITY 1
)
ENGINE = ReplacingMergeTree(revision)
ORDER BY (attribution_id)
SETTINGS non_replicated_deduplication_window = 10000
;
-- the verdict's lifecycle state (provisional | final | withdrawn) and its cost (goodput lost,
-- schemas.records.Cost; NULL: no cause found), for tables made before them
ALTER TABLE {database}.attributions
    ADD COLUMN IF NOT EXISTS status LowCardinality(String) AFTER quality,
    ADD COLUMN IF NOT EXISTS gpu_hours_lost Nullable(Float64) AFTER status,
    ADD COLUMN IF NOT EXISTS node_hours_lost Nullable(Float64) AFTER gpu_hours_lost,
    ADD COLUMN IF NOT EXISTS ran_after_cause_s Nullable(Float64) AFTER node_hours_lost,
    ADD COLUMN IF NOT EXISTS verdict_after_s Nullable(Float64) AFTER ran_after_cause_s,
    ADD COLUMN IF NOT EXISTS jobs_hit UInt32 AFTER verdict_after_s,
    ADD COLUMN IF NOT EXISTS nodes_hit UInt32 AFTER jobs_hit
;
-- a degraded (slow, not failed) job's goodput lost: the share of its speed and the GPU-hours it
-- loses per hour (schemas.records.Cost; NULL for a failure), for tables made before them
ALTER TABLE {database}.attributions
    ADD COLUMN IF NOT EXISTS goodput_lost_fraction Nullable(Float64) AFTER nodes_hit,
    ADD COLUMN IF NOT EXISTS gpu_hours_lost_per_hour Nullable(Float64) AFTER goodput_lost_fraction
;
CREATE TABLE IF NOT EXISTS {database}.remediations
(
    action_id        String,
    sequence         UInt32,
    schema_version   UInt16,
    attribution_id   String,
    incident_id      Nullable(String),
    cluster          LowCardinality(String),
    action           LowCardinality(String),
    mode             LowCardinality(String),
    state            LowCardinality(String),
    policy_id        LowCardinality(String),
    policy_version   LowCardinality(String),
    cause_code       LowCardinality(String),
    severity         UInt16,
    target_host      Nullable(String),
    target_gpu       Nullable(String),
    target_port      Nullable(String),
    target_hosts     Array(String),
    guards_failed    Array(String),
    reason           String,
    decision_by      Nullable(String),
    decision_at      Nullable(DateTime64(9, 'UTC')),
    decision_reason  Nullable(String),
    executor         Nullable(String),
    result           String,
    created_at       DateTime64(9, 'UTC'),
    updated_at       DateTime64(9, 'UTC'),
    expires_at       Nullable(DateTime64(9, 'UTC')),
    record           String CODEC(ZSTD(3)),
    inserted_at      DateTime64(3, 'UTC') DEFAULT now64(3),
    INDEX idx_target_host target_host TYPE bloom_filter GRANULARITY 4,
    INDEX idx_incident incident_id TYPE bloom_filter GRANULARITY 4,
    INDEX idx_updated_at updated_at TYPE minmax GRANULARITY 1
)
ENGINE = ReplacingMergeTree(sequence)
ORDER BY (action_id)
SETTINGS non_replicated_deduplication_window = 10000
;
-- every revision of every verdict (attributions keeps the latest): what a verdict said over
-- time, the stream's first (provisional) revision included
CREATE TABLE IF NOT EXISTS {database}.attribution_revisions AS {database}.attributions
ENGINE = ReplacingMergeTree
ORDER BY (attribution_id, revision)
SETTINGS non_replicated_deduplication_window = 10000
;
CREATE TABLE IF NOT EXISTS {database}.remediation_transitions AS {database}.remediations
ENGINE = ReplacingMergeTree
ORDER BY (action_id, sequence)
SETTINGS non_replicated_deduplication_window = 10000
;
CREATE TABLE IF NOT EXISTS {database}.certifications
(
    certification_id String,
    schema_version   UInt16,
    host             LowCardinality(String),
    cluster          LowCardinality(String),
    suite            LowCardinality(String),
    passed           Bool,
    tests            Array(String),
    tests_failed     Array(String),
    finished_at      DateTime64(9, 'UTC'),
    source           String,
    record           String CODEC(ZSTD(3)),
    inserted_at      DateTime64(3, 'UTC') DEFAULT now64(3),
    INDEX idx_host host TYPE bloom_filter GRANULARITY 4,
    INDEX idx_finished_at finished_at TYPE minmax GRANULARITY 1
)
ENGINE = ReplacingMergeTree
ORDER BY (certification_id)
SETTINGS non_replicated_deduplication_window = 10000
;
CREATE TABLE IF NOT EXISTS {database}.dead_letters
(
    dead_letter_id   String,
    schema_version   UInt16,
    source           LowCardinality(String),
    reason           String,
    original         String CODEC(ZSTD(3)),
    position_file    Nullable(String),
    position_line    Nullable(Int64),
    topic            Nullable(String),
    partition        Nullable(Int32),
    offset           Nullable(Int64),
    at               DateTime64(9, 'UTC'),
    record           String CODEC(ZSTD(3)),
    inserted_at      DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree
ORDER BY (dead_letter_id)
SETTINGS non_replicated_deduplication_window = 10000
