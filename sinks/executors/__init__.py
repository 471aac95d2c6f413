"""Remediation executors: carry out a :class:`schemas.records.RemediationAction` on a cluster.

* :class:`DryRunExecutor` -- logs what it would do (the default for every cluster);
* :class:`SlurmExecutor` -- ``scontrol`` drain / reboot / resume;
* :class:`KubernetesExecutor` -- cordon, taint, drain through the Eviction API, a node condition, resume;
* :class:`WebhookExecutor` -- POSTs the action's canonical JSON to an HTTP endpoint;
* :class:`NVSentinelExecutor` -- sends a HealthEvent to NVSentinel's platform connector (gRPC),
  whose quarantine, drain and remediation modules act.

Each returns an :class:`ExecutionResult` and never raises for an operational failure
(``sinks/executors/base.py``). Which executor acts on which cluster: :class:`ExecutorSettings`
(``FAULTSTREAM_EXECUTOR_CLUSTERS``), :func:`build_executor`, :data:`EXECUTORS`.
"""

from sinks.executors.base import ExecutionResult, Executor, TransientError
from sinks.executors.dry_run import DryRunExecutor
from sinks.executors.kubernetes import KubernetesExecutor
from sinks.executors.nvsentinel import NVSentinelExecutor
from sinks.executors.settings import EXECUTORS, ClusterExecutor, ExecutorSettings, build_executor
from sinks.executors.slurm import SlurmExecutor, slurm_reason
from sinks.executors.webhook import WebhookExecutor

__all__ = [
    "ExecutionResult",
    "Executor",
    "TransientError",
    "DryRunExecutor",
    "SlurmExecutor",
    "KubernetesExecutor",
    "WebhookExecutor",
    "NVSentinelExecutor",
    "EXECUTORS",
    "ClusterExecutor",
    "ExecutorSettings",
    "build_executor",
    "slurm_reason",
]
