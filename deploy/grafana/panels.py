"""The panels of faultstream's Grafana fleet dashboard: the one place their SQL lives.

``python deploy/grafana/build.py`` turns :data:`PANELS` into the dashboard JSON that Grafana
provisions (``deploy/grafana/dashboards/faultstream-fleet.json``), and
``tests/sinks/test_grafana_panels.py`` runs every panel's SQL, with the data source's macros
expanded as the plugin expands them (``deploy/grafana/macros.py``), against chDB loaded with
replayed incidents.

The SQL is ClickHouse SQL for the ClickHouse data source plugin (grafana-clickhouse-datasource
4.x) over the tables of ``sinks/ddl.sql``. Table names are not qualified: the data source's
``defaultDatabase`` is faultstream's database (``faultstream`` unless the sink was given
another). Every table is a ReplacingMergeTree, so the latest state of a record is read with
``FINAL`` (the highest ``revision`` of a verdict, the highest ``sequence`` of a remediation
action). ``attributions`` keeps only a verdict's highest revision (older ones collapse on
insert and at merges), so the time-to-first-verdict panels read ``attribution_revisions``
(every revision of every verdict, sinks/ddl.sql) for each verdict's lowest revision. The circuit breaker panel reads
``remediation_transitions``, which keeps every transition.

Conventions shared by the panels:

* **an incident** is one fault: the verdicts that share an ``incident_id`` (a flapping port
  that broke two jobs: two workload verdicts, the fabric-port verdict and the incident
  verdict) count once; a verdict without one is an incident of its own. Withdrawn verdicts
  (``status = 'withdrawn'``) and verdicts without a fault (``root_cause_code`` ``none``: the
  job completed, or ``''``: a withdrawal) are left out;
* **GPU-hours lost** of an incident are the sum of its *workload* verdicts'
  ``gpu_hours_lost`` (an incident or fabric-port verdict's cost already sums its workloads',
  so adding those too would count the hours twice);
* **days** are UTC days (``toStartOfDay`` of a ``DateTime64(9, 'UTC')`` column); an
  incident's day and domain are those of its earliest verdict (``decided_at``, event time);
* the dashboard's time range filters on event time: ``decided_at`` for verdicts,
  ``updated_at`` for remediation transitions, ``at`` for dead letters (``$__timeFilter``:
  whole seconds, both ends inclusive). Panels that show a current state say so;
* the ``cluster`` and ``domain`` variables (:data:`VARIABLES`) filter through the plugin's
  ``$__conditionalAll`` (All: no condition): every verdict panel on both (an incident's domain
  is its earliest verdict's, the time-to-first-verdict panels' their first revision's), the
  remediation and circuit-breaker panels on ``cluster``; dead letters have no cluster;
* **goodput of slow jobs**: a ``degraded`` workload verdict (a straggler) carries
  ``goodput_lost_fraction`` (the share of the job's speed lost) and ``gpu_hours_lost_per_hour``
  (GPUs x that share); the goodput panels sum the latter per cluster and UTC day.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Panel", "PANELS", "Variable", "VARIABLES", "DASHBOARD_UID", "DASHBOARD_TITLE", "DATASOURCE_UID", "PLUGIN_ID",
           "PLUGIN_VERSION", "TERMINAL_STATES", "OPEN_STATES", "BREAKER_STATES"]

#: The plugin's id (the data source ``type``) and the version the dashboard was written for.
PLUGIN_ID = "grafana-clickhouse-datasource"
PLUGIN_VERSION = "4.14.0"
#: The uid of the provisioned data source (deploy/grafana/provisioning/datasources/).
DATASOURCE_UID = "faultstream-clickhouse"
DASHBOARD_UID = "faultstream-fleet"
DASHBOARD_TITLE = "faultstream: fleet overview"

#: Remediation states no transition leaves (correlators/remediation/lifecycle.py TERMINAL).
TERMINAL_STATES = ("cancelled", "done", "expired", "failed", "rejected")
#: Remediation states still waiting for a person, an executor or a certification.
OPEN_STATES = ("proposed", "approved", "executing")
#: What the circuit breaker panel calls a cluster's breaker (its latest guard result).
BREAKER_STATES = ("tripped", "fail_closed", "reset", "closed")


@dataclass(frozen=True)
class Panel:
    """One dashboard panel.

    ``key``: a stable name (tests and the panel id refer to it); ``title`` / ``description``:
    what Grafana shows; ``viz``: the Grafana panel type; ``format``: how the plugin shapes the
    result (``timeseries``: a ``time`` column plus label and value columns, turned wide per
    label; ``table``: rows as they come); ``sql``: the query (ClickHouse SQL with the plugin's
    ``$__`` macros); ``columns``: the result's column names, in order; ``grid``: Grafana's
    ``gridPos`` (x, y, w, h; 24 columns wide); ``unit``: the default unit of its numbers;
    ``field_overrides``: Grafana field overrides (units and colours of single columns);
    ``options``: the panel's Grafana options; ``custom``: ``fieldConfig.defaults.custom``."""

    key: str
    title: str
    description: str
    viz: Literal["timeseries", "table", "barchart"]
    format: Literal["timeseries", "table"]
    sql: str
    columns: tuple[str, ...]
    grid: tuple[int, int, int, int]
    unit: str = "short"
    field_overrides: tuple[dict[str, Any], ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    custom: dict[str, Any] = field(default_factory=dict)
    decimals: int | None = None


# --- shared SQL ------------------------------------------------------------------------------

#: The dashboard's ``cluster`` filter (``$__conditionalAll``: no filter when "All" is chosen).
_CLUSTER = "$__conditionalAll(cluster IN (${cluster:singlequote}), $cluster)"
#: The dashboard's ``domain`` filter.
_DOMAIN = "$__conditionalAll(domain IN (${domain:singlequote}), $domain)"


@dataclass(frozen=True)
class Variable:
    """A dashboard variable whose values come from ClickHouse: ``name`` (``$name`` in the
    panels), ``label``, ``sql`` (one column: the values), ``description``. Multi-value with an
    "All" choice, refreshed on dashboard load; the panels filter with ``$__conditionalAll`` so
    that "All" adds no condition."""

    name: str
    label: str
    sql: str
    description: str


VARIABLES: tuple[Variable, ...] = (
    Variable("cluster", "cluster", "SELECT DISTINCT cluster FROM attributions WHERE cluster != '' ORDER BY cluster",
             "the clusters faultstream decided verdicts in (dead letters have no cluster: their panels ignore it)"),
    Variable("domain", "domain",
             "SELECT DISTINCT domain FROM attributions WHERE domain NOT IN ('', 'none') ORDER BY domain",
             "the verdict domains (an incident's is its earliest verdict's); remediation, circuit breaker and "
             "dead letter panels ignore it"),
)


#: The incidents in the time range: one row per incident (see the module docstring), with the
#: cluster, its earliest verdict's day and domain, the GPU- and node-hours its workload
#: verdicts lost, the jobs it hit, its culprit hosts and ports and its last verdict time.
_INCIDENTS = f"""\
incidents AS
(
    SELECT
        cluster,
        coalesce(incident_id, attribution_id) AS incident,
        toStartOfDay(min(decided_at)) AS day,
        argMin(domain, (decided_at, attribution_id)) AS first_domain,
        ifNull(sumIf(gpu_hours_lost, scope_kind = 'workload'), 0) AS incident_gpu_hours,
        ifNull(sumIf(node_hours_lost, scope_kind = 'workload'), 0) AS incident_node_hours,
        countIf(scope_kind = 'workload') AS jobs,
        groupUniqArrayArray(culprit_hosts) AS hosts,
        groupUniqArrayArray(culprit_ports) AS ports,
        max(decided_at) AS last_at
    FROM attributions FINAL
    WHERE $__timeFilter(decided_at)
      AND status != 'withdrawn'
      AND root_cause_code NOT IN ('', 'none')
      AND {_CLUSTER}
    GROUP BY cluster, incident
    HAVING {_DOMAIN.replace('domain IN', 'first_domain IN')}
)"""

#: Buckets of the time-to-verdict distribution: (label, lower bound s, upper bound s).
TIME_TO_VERDICT_BUCKETS: tuple[tuple[str, float, float], ...] = (
    ("< 10 s", 0, 10),
    ("10 s - 1 min", 10, 60),
    ("1 - 5 min", 60, 300),
    ("5 - 15 min", 300, 900),
    ("15 - 60 min", 900, 3600),
    (">= 1 h", 3600, 1e18),
)


def _buckets_sql() -> str:
    return "[" + ", ".join(f"('{label}', {lo:g}, {hi:g})" for label, lo, hi in TIME_TO_VERDICT_BUCKETS) + "]"


def _in(values: tuple[str, ...]) -> str:
    return "(" + ", ".join(f"'{v}'" for v in values) + ")"


_BARS = {"drawStyle": "bars", "fillOpacity": 80, "lineWidth": 1, "stacking": {"mode": "normal", "group": "A"},
         "barAlignment": 0, "showPoints": "never"}


def _unit(column: str, unit: str, decimals: int | None = None) -> dict[str, Any]:
    props: list[dict[str, Any]] = [{"id": "unit", "value": unit}]
    if decimals is not None:
        props.append({"id": "decimals", "value": decimals})
    return {"matcher": {"id": "byName", "options": column}, "properties": props}


_BREAKER_COLOURS = {
    "matcher": {"id": "byName", "options": "state"},
    "properties": [
        {"id": "custom.cellOptions", "value": {"type": "color-background"}},
        {"id": "mappings", "value": [{"type": "value", "options": {
            "tripped": {"color": "red", "index": 0, "text": "tripped"},
            "fail_closed": {"color": "orange", "index": 1, "text": "fail closed"},
            "reset": {"color": "yellow", "index": 2, "text": "reset by a person"},
            "closed": {"color": "green", "index": 3, "text": "closed"},
        }}]},
    ],
}


PANELS: tuple[Panel, ...] = (
    Panel(
        key="incidents_per_domain",
        title="Incidents per domain per day",
        description="Faults faultstream attributed, one per incident (verdicts sharing an incident_id "
                    "count once), by the domain of the incident's earliest verdict and its UTC day. "
                    "Withdrawn verdicts and completed jobs are left out.",
        viz="timeseries",
        format="timeseries",
        sql=f"""\
WITH
{_INCIDENTS}
SELECT
    day AS time,
    first_domain AS domain,
    count() AS incidents
FROM incidents
GROUP BY time, domain
ORDER BY time, domain""",
        columns=("time", "domain", "incidents"),
        grid=(0, 0, 12, 8),
        custom=_BARS,
        decimals=0,
    ),
    Panel(
        key="gpu_hours_per_domain",
        title="GPU-hours lost per domain per day",
        description="GPU-hours lost (allocated GPUs x time from the back-dated cause to the job's end or "
                    "restart), summed over the workload verdicts of each incident, by the incident's "
                    "domain and UTC day.",
        viz="timeseries",
        format="timeseries",
        sql=f"""\
WITH
{_INCIDENTS}
SELECT
    day AS time,
    first_domain AS domain,
    sum(incident_gpu_hours) AS gpu_hours_lost
FROM incidents
GROUP BY time, domain
ORDER BY time, domain""",
        columns=("time", "domain", "gpu_hours_lost"),
        grid=(12, 0, 12, 8),
        custom=_BARS,
        decimals=2,
    ),
    Panel(
        key="gpu_hours_per_cluster",
        title="GPU-hours lost per cluster per day",
        description="GPU-hours lost, summed over the workload verdicts of each incident (failed and slow jobs "
                    "alike), by cluster and the UTC day of the incident's earliest verdict.",
        viz="timeseries",
        format="timeseries",
        sql=f"""\
WITH
{_INCIDENTS}
SELECT
    day AS time,
    cluster,
    sum(incident_gpu_hours) AS gpu_hours_lost
FROM incidents
GROUP BY time, cluster
ORDER BY time, cluster""",
        columns=("time", "cluster", "gpu_hours_lost"),
        grid=(0, 8, 12, 8),
        custom=_BARS,
        decimals=2,
    ),
    Panel(
        key="degraded_goodput_per_cluster",
        title="Goodput lost by slow jobs per cluster",
        description="Jobs that run slow rather than fail (outcome degraded: a straggler GPU or node): the "
                    "GPU-hours they lose per hour (allocated GPUs x the share of their speed lost, "
                    "cost.gpu_hours_lost_per_hour), summed by cluster and the UTC day of the verdict.",
        viz="timeseries",
        format="timeseries",
        sql=f"""\
SELECT
    toStartOfDay(decided_at) AS time,
    cluster,
    sum(gpu_hours_lost_per_hour) AS gpu_hours_per_hour_lost
FROM attributions FINAL
WHERE $__timeFilter(decided_at)
  AND status != 'withdrawn'
  AND scope_kind = 'workload'
  AND outcome = 'degraded'
  AND gpu_hours_lost_per_hour IS NOT NULL
  AND {_CLUSTER}
  AND {_DOMAIN}
GROUP BY time, cluster
ORDER BY time, cluster""",
        columns=("time", "cluster", "gpu_hours_per_hour_lost"),
        grid=(12, 8, 12, 8),
        custom=_BARS,
        decimals=2,
    ),
    Panel(
        key="degraded_jobs",
        title="Slow jobs: goodput lost",
        description="Each degraded job's latest verdict: the cause (straggler.* codes name the reason), the "
                    "slow hosts and GPUs, the share of the job's speed lost (1 - healthy / observed step "
                    "time), the GPU-hours it loses per hour and has lost, and since when it is slow.",
        viz="table",
        format="table",
        sql=f"""\
SELECT
    cluster,
    scope_id AS job,
    root_cause_code AS cause,
    quality,
    arrayStringConcat(culprit_hosts, ', ') AS hosts,
    arrayStringConcat(culprit_gpus, ', ') AS gpus,
    goodput_lost_fraction,
    gpu_hours_lost_per_hour,
    gpu_hours_lost,
    if(JSONHas(record, 'cost', 'lost_from'),
       fromUnixTimestamp64Nano(JSONExtractInt(record, 'cost', 'lost_from'), 'UTC'), NULL) AS slow_since,
    decided_at
FROM attributions FINAL
WHERE $__timeFilter(decided_at)
  AND status != 'withdrawn'
  AND scope_kind = 'workload'
  AND outcome = 'degraded'
  AND {_CLUSTER}
  AND {_DOMAIN}
ORDER BY gpu_hours_lost_per_hour DESC, decided_at, attribution_id
LIMIT 50""",
        columns=("cluster", "job", "cause", "quality", "hosts", "gpus", "goodput_lost_fraction",
                 "gpu_hours_lost_per_hour", "gpu_hours_lost", "slow_since", "decided_at"),
        grid=(0, 16, 24, 8),
        field_overrides=(_unit("goodput_lost_fraction", "percentunit", 1), _unit("gpu_hours_lost_per_hour", "none", 2),
                         _unit("gpu_hours_lost", "none", 2)),
    ),
    Panel(
        key="goodput_by_domain",
        title="Goodput lost by domain",
        description="Per domain over the time range: incidents, jobs hit, GPU-hours and node-hours lost.",
        viz="table",
        format="table",
        sql=f"""\
WITH
{_INCIDENTS}
SELECT
    first_domain AS domain,
    count() AS incidents,
    sum(jobs) AS jobs_hit,
    sum(incident_gpu_hours) AS gpu_hours_lost,
    sum(incident_node_hours) AS node_hours_lost
FROM incidents
GROUP BY domain
ORDER BY gpu_hours_lost DESC, incidents DESC, domain""",
        columns=("domain", "incidents", "jobs_hit", "gpu_hours_lost", "node_hours_lost"),
        grid=(0, 24, 8, 8),
        field_overrides=(_unit("gpu_hours_lost", "none", 2), _unit("node_hours_lost", "none", 2)),
    ),
    Panel(
        key="top_culprit_hosts",
        title="Top culprit nodes",
        description="The hosts verdicts blame (culprits.hosts), ranked by the GPU-hours their incidents "
                    "lost: an incident that blames two hosts counts fully for each.",
        viz="table",
        format="table",
        sql=f"""\
WITH
{_INCIDENTS}
SELECT
    cluster,
    host,
    count() AS incidents,
    sum(incident_gpu_hours) AS gpu_hours_lost,
    max(last_at) AS last_verdict_at
FROM incidents
ARRAY JOIN hosts AS host
GROUP BY cluster, host
ORDER BY gpu_hours_lost DESC, incidents DESC, cluster, host
LIMIT 20""",
        columns=("cluster", "host", "incidents", "gpu_hours_lost", "last_verdict_at"),
        grid=(8, 24, 8, 8),
        field_overrides=(_unit("gpu_hours_lost", "none", 2),),
    ),
    Panel(
        key="top_culprit_ports",
        title="Top culprit ports",
        description="The fabric ports verdicts blame (culprits.ports: <switch>/<port> or "
                    "<host>/<hca>/<port>, both ends of a cable), ranked by the GPU-hours their "
                    "incidents lost.",
        viz="table",
        format="table",
        sql=f"""\
WITH
{_INCIDENTS}
SELECT
    cluster,
    port,
    count() AS incidents,
    sum(incident_gpu_hours) AS gpu_hours_lost,
    sum(jobs) AS jobs_hit,
    max(last_at) AS last_verdict_at
FROM incidents
ARRAY JOIN ports AS port
GROUP BY cluster, port
ORDER BY gpu_hours_lost DESC, incidents DESC, cluster, port
LIMIT 20""",
        columns=("cluster", "port", "incidents", "gpu_hours_lost", "jobs_hit", "last_verdict_at"),
        grid=(16, 24, 8, 8),
        field_overrides=(_unit("gpu_hours_lost", "none", 2),),
    ),
    Panel(
        key="time_to_verdict",
        title="Time to first verdict",
        description="Seconds from the back-dated cause to faultstream's first revision of each verdict "
                    "(cost.verdict_after_s of revision 1: the stream's first, usually provisional, "
                    "verdict; a replay's only one), by scope kind, for verdicts first decided in the "
                    "time range. Interpolated quantiles (quantileExactInclusive).",
        viz="table",
        format="table",
        sql=f"""\
SELECT
    scope_kind,
    count() AS verdicts,
    quantileExactInclusive(0.5)(verdict_after_s) AS p50_s,
    quantileExactInclusive(0.9)(verdict_after_s) AS p90_s,
    max(verdict_after_s) AS max_s
FROM (
    SELECT attribution_id,
           argMin(scope_kind, revision) AS scope_kind,
           argMin(verdict_after_s, revision) AS verdict_after_s,
           argMin(decided_at, revision) AS decided_at,
           argMin(cluster, revision) AS cluster,
           argMin(domain, revision) AS domain
    FROM attribution_revisions FINAL
    GROUP BY attribution_id
)
WHERE verdict_after_s IS NOT NULL
  AND $__timeFilter(decided_at)
  AND {_CLUSTER}
  AND {_DOMAIN}
GROUP BY scope_kind
ORDER BY scope_kind""",
        columns=("scope_kind", "verdicts", "p50_s", "p90_s", "max_s"),
        grid=(0, 32, 10, 7),
        field_overrides=(_unit("p50_s", "s", 1), _unit("p90_s", "s", 1), _unit("max_s", "s", 1)),
    ),
    Panel(
        key="time_to_verdict_buckets",
        title="Time to first verdict, workload verdicts",
        description="How many workload verdicts faultstream first decided within each time after the "
                    "cause (cost.verdict_after_s of revision 1).",
        viz="barchart",
        format="table",
        sql=f"""\
SELECT
    tupleElement(b, 1) AS bucket,
    countIf(verdict_after_s >= tupleElement(b, 2) AND verdict_after_s < tupleElement(b, 3)) AS verdicts
FROM (
    SELECT attribution_id,
           argMin(scope_kind, revision) AS scope_kind,
           argMin(verdict_after_s, revision) AS verdict_after_s,
           argMin(decided_at, revision) AS decided_at,
           argMin(cluster, revision) AS cluster,
           argMin(domain, revision) AS domain
    FROM attribution_revisions FINAL
    GROUP BY attribution_id
)
ARRAY JOIN {_buckets_sql()} AS b
WHERE scope_kind = 'workload'
  AND verdict_after_s IS NOT NULL
  AND $__timeFilter(decided_at)
  AND {_CLUSTER}
  AND {_DOMAIN}
GROUP BY bucket
ORDER BY min(tupleElement(b, 2))""",
        columns=("bucket", "verdicts"),
        grid=(10, 32, 14, 7),
        options={"xField": "bucket", "orientation": "vertical", "showValue": "always",
                 "legend": {"showLegend": False, "displayMode": "list", "placement": "bottom", "calcs": []}},
        decimals=0,
    ),
    Panel(
        key="remediation_outcomes",
        title="Remediation outcomes per day",
        description="Remediation actions by the terminal state they reached (done, failed, rejected, "
                    "expired, cancelled) and the UTC day of that transition.",
        viz="timeseries",
        format="timeseries",
        sql=f"""\
SELECT
    toStartOfDay(updated_at) AS time,
    state,
    count() AS actions
FROM remediations FINAL
WHERE state IN {_in(TERMINAL_STATES)}
  AND $__timeFilter(updated_at)
  AND {_CLUSTER}
GROUP BY time, state
ORDER BY time, state""",
        columns=("time", "state", "actions"),
        grid=(0, 39, 12, 8),
        custom=_BARS,
        decimals=0,
    ),
    Panel(
        key="open_actions",
        title="Open remediation actions (now)",
        description="Actions still proposed, approved or executing, whatever the time range: what waits "
                    "for a person (proposed), an executor (approved) or a certification (executing). "
                    "guards_failed names the guards that sent an action to a person.",
        viz="table",
        format="table",
        sql=f"""\
SELECT
    cluster,
    action,
    coalesce(target_host, target_port, nullIf(arrayStringConcat(target_hosts, ','), '')) AS target,
    state,
    mode,
    cause_code,
    arrayStringConcat(guards_failed, ', ') AS guards_failed,
    created_at,
    expires_at
FROM remediations FINAL
WHERE state IN {_in(OPEN_STATES)}
  AND {_CLUSTER}
ORDER BY severity DESC, created_at, action_id""",
        columns=("cluster", "action", "target", "state", "mode", "cause_code", "guards_failed", "created_at",
                 "expires_at"),
        grid=(12, 39, 12, 8),
    ),
    Panel(
        key="circuit_breaker",
        title="Circuit breaker per cluster",
        description="The latest circuit_breaker guard result of each cluster up to the end of the time "
                    "range (the engine records it on every disruptive action): tripped (no disruptive "
                    "action runs until a person resets it), fail_closed (the node count is unknown or the "
                    "verdict is too late: a person decides), reset (closed by a person after a trip) or "
                    "closed. An evaluation is a transition whose breaker result differs from the action's "
                    "previous transition (approvals and executions carry the result on unchanged); "
                    "checked_at is its time.",
        viz="table",
        format="table",
        sql=f"""\
WITH
breaker AS
(
    SELECT
        cluster,
        action_id,
        sequence,
        updated_at,
        tupleElement(g, 'passed') AS guard_passed,
        tupleElement(g, 'detail') AS guard_detail
    FROM remediation_transitions FINAL
    ARRAY JOIN JSONExtract(record, 'guards', 'Array(Tuple(guard String, passed Bool, detail String))') AS g
    WHERE tupleElement(g, 'guard') = 'circuit_breaker'
      AND updated_at <= $__toTime
      AND {_CLUSTER}
),
evaluations AS
(
    SELECT
        cluster,
        action_id,
        sequence,
        updated_at,
        guard_passed,
        guard_detail,
        row_number() OVER w = 1
            OR lagInFrame(guard_passed) OVER w != guard_passed
            OR lagInFrame(guard_detail) OVER w != guard_detail AS evaluated
    FROM breaker
    WINDOW w AS (PARTITION BY action_id ORDER BY sequence ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
)
SELECT
    cluster,
    argMax(multiIf(startsWith(guard_detail, 'tripped'), 'tripped',
                   startsWith(guard_detail, 'blocked while the breaker was tripped'), 'reset',
                   guard_passed, 'closed',
                   'fail_closed'), (updated_at, sequence, action_id)) AS state,
    max(updated_at) AS checked_at,
    argMax(guard_detail, (updated_at, sequence, action_id)) AS detail
FROM evaluations
WHERE evaluated
GROUP BY cluster
ORDER BY cluster""",
        columns=("cluster", "state", "checked_at", "detail"),
        grid=(0, 47, 12, 7),
        field_overrides=(_BREAKER_COLOURS,),
    ),
    Panel(
        key="dead_letters_per_source",
        title="Dead letters per source per day",
        description="Input faultstream could not process (kept with the reason and the original bytes in "
                    "dead_letters), by the component that rejected it and the UTC day.",
        viz="timeseries",
        format="timeseries",
        sql="""\
SELECT
    toStartOfDay(at) AS time,
    source,
    count() AS dead_letters
FROM dead_letters FINAL
WHERE $__timeFilter(at)
GROUP BY time, source
ORDER BY time, source""",
        columns=("time", "source", "dead_letters"),
        grid=(12, 47, 12, 7),
        custom=_BARS,
        decimals=0,
    ),
    Panel(
        key="dead_letter_reasons",
        title="Dead letter reasons",
        description="Dead letters in the time range by source and the kind of reason (the text before "
                    "the first colon), with the latest one's full reason.",
        viz="table",
        format="table",
        sql="""\
SELECT
    source,
    splitByChar(':', reason)[1] AS kind,
    count() AS dead_letters,
    max(at) AS last_at,
    argMax(reason, (at, dead_letter_id)) AS last_reason
FROM dead_letters FINAL
WHERE $__timeFilter(at)
GROUP BY source, kind
ORDER BY dead_letters DESC, source, kind""",
        columns=("source", "kind", "dead_letters", "last_at", "last_reason"),
        grid=(0, 54, 24, 7),
    ),
)
