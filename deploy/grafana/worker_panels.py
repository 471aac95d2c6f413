"""The panels of faultstream's worker-health dashboard: the one place their PromQL lives.

``python deploy/grafana/build.py`` turns :data:`PANELS` into
``deploy/grafana/dashboards/faultstream-worker.json``. The queries read the metrics a
``faultstream worker`` serves at ``/metrics`` (the Faust web port, 6066 by default; both
stages' metrics are served there, ``streams/metrics.py``), scraped by a Prometheus job of the
user's (the ``job`` label). ``tests/sinks/test_grafana_worker.py`` checks every expression
with ``promtool`` (syntax, then values over series named and labelled as the worker exports
them) and that every metric and label it names is one the worker's code defines.

Variables: ``prometheus`` (the data source), ``job`` and ``instance`` (multi-value, "All" is
``.*``), ``domain`` (the ``domain`` label of ``faultstream_verdicts_total``). The worker's
metrics carry no cluster label: a worker serves the clusters of its partitions, so the
per-cluster view is the ClickHouse dashboard's. Grafana replaces ``$__rate_interval`` (at least
four scrape intervals) and the variables (regex-escaped, ``(a|b)`` for several values) before
Prometheus sees the query.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

__all__ = ["PromPanel", "PANELS", "VARIABLES", "DASHBOARD_UID", "DASHBOARD_TITLE", "SELECTOR", "interpolate"]

DASHBOARD_UID = "faultstream-worker"
DASHBOARD_TITLE = "faultstream: worker health"

#: The label matchers every query carries: the dashboard's job and instance choice.
SELECTOR = 'job=~"$job", instance=~"$instance"'

#: name -> (label, the label_values() query of its choices)
VARIABLES: dict[str, tuple[str, str]] = {
    "job": ("Prometheus job", "label_values(faultstream_observations_total, job)"),
    "instance": ("worker", 'label_values(faultstream_observations_total{job=~"$job"}, instance)'),
    "domain": ("verdict domain", 'label_values(faultstream_verdicts_total{job=~"$job"}, domain)'),
}


@dataclass(frozen=True)
class PromPanel:
    """One panel over Prometheus: ``key`` (stable name), ``title``, ``description``,
    ``targets`` ((PromQL, legend format) per query, refIds A, B, ...), ``grid`` (x, y, w, h),
    ``unit``, ``viz`` (Grafana panel type) and ``decimals``."""

    key: str
    title: str
    description: str
    targets: tuple[tuple[str, str], ...]
    grid: tuple[int, int, int, int]
    unit: str = "short"
    viz: Literal["timeseries", "stat"] = "timeseries"
    decimals: int | None = None


S = SELECTOR

PANELS: tuple[PromPanel, ...] = (
    PromPanel(
        key="consumer_lag",
        title="Consumer lag by topic",
        description="Messages behind the high watermark, summed over the partitions of each topic "
                    "(faultstream_consumer_lag). Growing lag means verdicts come late: add workers (up to "
                    "the partition count) or run the ingest stage apart.",
        targets=((f"sum by (topic) (faultstream_consumer_lag{{{S}}})", "{{topic}}"),),
        grid=(0, 0, 12, 8),
        decimals=0,
    ),
    PromPanel(
        key="throughput",
        title="Observations consumed and processed",
        description="Observations read per second and those processed (not dead-lettered), per worker.",
        targets=((f"sum by (instance) (rate(faultstream_observations_total{{{S}}}[$__rate_interval]))",
                  "{{instance}} consumed"),
                 (f"sum by (instance) (rate(faultstream_observations_processed_total{{{S}}}[$__rate_interval]))",
                  "{{instance}} processed")),
        grid=(12, 0, 12, 8),
        unit="ops",
    ),
    PromPanel(
        key="dead_letters",
        title="Dead letters by reason",
        description="Inputs refused and kept on the dead-letter topic with their reason "
                    "(faultstream_dead_letters_total), per interval; nothing is lost: the dead_letters "
                    "table and `faultstream deadletter` show them.",
        targets=((f"sum by (reason) (increase(faultstream_dead_letters_total{{{S}}}[$__rate_interval]))",
                  "{{reason}}"),),
        grid=(0, 8, 12, 8),
        decimals=0,
    ),
    PromPanel(
        key="sink_errors",
        title="ClickHouse sink: records refused and rows written",
        description="Records the ClickHouse writer refused (invalid: dead-lettered with the reason, "
                    "faultstream_clickhouse_skipped_total) per interval, and rows written per second by "
                    "table. Rows that stop while observations flow mean the writer is retrying an "
                    "unreachable server (its offsets are not committed).",
        targets=((f"sum by (model) (increase(faultstream_clickhouse_skipped_total{{{S}}}[$__rate_interval]))",
                  "refused {{model}}"),
                 (f"sum by (table) (rate(faultstream_clickhouse_rows_total{{{S}}}[$__rate_interval]))",
                  "rows/s {{table}}")),
        grid=(12, 8, 12, 8),
    ),
    PromPanel(
        key="windows",
        title="Open and stalled windows",
        description="Workload windows not closed yet (faultstream_open_windows, sampled every 5 s), and the "
                    "same count on a worker that emitted no verdict for 30 minutes while windows stay "
                    "open: stalled windows (stuck idle timer or agent).",
        targets=((f"sum by (instance) (faultstream_open_windows{{{S}}})", "{{instance}} open"),
                 (f"(sum by (instance) (faultstream_open_windows{{{S}}}) > 0) unless on (instance) "
                  f"(sum by (instance) (increase(faultstream_verdicts_total{{{S}}}[30m])) > 0)",
                  "{{instance}} stalled")),
        grid=(0, 16, 12, 8),
        decimals=0,
    ),
    PromPanel(
        key="ingest_restarts",
        title="Ingest stage restarts",
        description="Restarts of the worker's batch ingest child after it died "
                    "(faultstream_ingest_restarts_total) in the last hour; its log names the reason.",
        targets=((f"sum by (instance) (increase(faultstream_ingest_restarts_total{{{S}}}[1h]))", "{{instance}}"),),
        grid=(12, 16, 12, 8),
        decimals=0,
    ),
    PromPanel(
        key="ingest_batch_seconds",
        title="Ingest batch time, p50 / p99",
        description="Seconds from consuming a batch to committing it in the ingest stage "
                    "(faultstream_ingest_batch_seconds), quantiles per worker.",
        targets=tuple((f"histogram_quantile({q}, sum by (le, instance) "
                       f"(rate(faultstream_ingest_batch_seconds_bucket{{{S}}}[$__rate_interval])))",
                       f"{{{{instance}}}} p{int(q * 100)}") for q in (0.5, 0.99)),
        grid=(0, 24, 12, 8),
        unit="s",
    ),
    PromPanel(
        key="verdicts",
        title="Verdicts by domain",
        description="Verdicts emitted per interval by domain and kind (faultstream_verdicts_total).",
        targets=((f'sum by (domain, kind) (increase(faultstream_verdicts_total{{{S}, domain=~"$domain"}}'
                  f"[$__rate_interval]))", "{{domain}} {{kind}}"),),
        grid=(12, 24, 12, 8),
        decimals=0,
    ),
    PromPanel(
        key="agent_inputs",
        title="Agent inputs by outcome",
        description="Records each agent read per second, processed or dead-lettered "
                    "(faultstream_agent_inputs_total), and offsets read again after a gap "
                    "(faultstream_offset_gaps_total).",
        targets=((f"sum by (agent, outcome) (rate(faultstream_agent_inputs_total{{{S}}}[$__rate_interval]))",
                  "{{agent}} {{outcome}}"),
                 (f"sum by (topic) (increase(faultstream_offset_gaps_total{{{S}}}[$__rate_interval]))",
                  "offset gaps {{topic}}")),
        grid=(0, 32, 12, 8),
    ),
    PromPanel(
        key="executor_failures",
        title="Remediation executor failures",
        description="Executor calls that failed in the last hour by executor "
                    "(faultstream_remediation_executions_total with ok=\"false\"); each failure is on its "
                    "action's record with the reason.",
        targets=((f'sum by (executor) (increase(faultstream_remediation_executions_total{{{S}, ok="false"}}[1h]))',
                  "{{executor}}"),),
        grid=(12, 32, 12, 8),
        decimals=0,
    ),
    PromPanel(
        key="up",
        title="Workers up",
        description="Whether Prometheus scrapes each worker's /metrics (1) or not (0).",
        targets=((f"up{{{S}}}", "{{instance}}"),),
        grid=(0, 40, 24, 4),
        viz="stat",
        decimals=0,
    ),
)


_SPECIAL = re.compile(r"[$^*{}\[\]'+?.()|]")
_VARIABLE = re.compile(r"\$(?!__)(\w+)|\$\{(?!__)(\w+)\}")


def _regex_escape(value: str) -> str:
    # Grafana's prometheusSpecialRegexEscape: a backslash doubled twice, a regex metacharacter
    # behind an escaped backslash (the PromQL string then holds one backslash before it)
    return _SPECIAL.sub(lambda m: "\\\\" + m.group(0), value.replace("\\", "\\\\\\\\"))


def interpolate(expr: str, values: dict[str, list[str] | None], rate_interval: str = "1m") -> str:
    """``expr`` as Grafana's Prometheus data source sends it (``interpolateQueryExpr`` of
    public/app/plugins/datasource/prometheus): ``$__rate_interval`` replaced by
    ``rate_interval`` (a PromQL duration), each multi-value variable by its values
    regex-escaped (one as is, several as ``(a|b)``), "All" (None) by the variables' ``allValue``
    ``.*``. Raises KeyError for a variable not in ``values``."""
    expr = expr.replace("$__rate_interval", rate_interval)

    def replace(m: re.Match) -> str:
        chosen = values[m.group(1) or m.group(2)]
        if chosen is None:
            return ".*"
        escaped = [_regex_escape(v) for v in chosen]
        return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"

    return _VARIABLE.sub(replace, expr)
