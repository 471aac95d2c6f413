"""Which executor acts on which cluster: the registry and the settings.

Every executor is **off by default**: a cluster acts through the dry-run executor (which only
logs) unless the settings name another executor for it. Settings come from the environment
(pydantic-settings, prefix ``FAULTSTREAM_EXECUTOR_``):

=================================  ==========================================================
variable                           meaning (default)
=================================  ==========================================================
FAULTSTREAM_EXECUTOR_CLUSTERS      JSON object: cluster name -> executor entry (``{}``: every
                                   cluster dry-run)
=================================  ==========================================================

An entry is ``{"kind": <kind>, "dry_run": <bool>, <option>: <value>, ...}``:

* ``kind``: ``dry_run`` (default), ``slurm``, ``kubernetes``, ``webhook``, ``nvsentinel`` or
  ``alertmanager`` (:data:`EXECUTORS`);
* ``notify`` (optional): where ``notify`` actions go instead of the executor -- an entry of kind
  ``alertmanager`` (``{"kind": "alertmanager", "url": "http://alertmanager:9093"}``: an alert,
  ``sinks/executors/alertmanager.py``) or ``webhook`` (the generic webhook executor); every
  other action and every resume still goes to ``kind``;
* ``dry_run``: ``true`` plans with that executor -- logs the exact ``scontrol`` / ``kubectl``
  / HTTP request it would make -- without running it (default ``false``);
* every other key is a keyword option of the executor's constructor, checked when the settings
  load (an unknown option or a missing ``url`` is a clear error, not a late surprise):
  ``slurm``: ``scontrol``, ``timeout_s``, ``attempts``, ``retry_wait_s``, ``retry_max_wait_s``;
  ``kubernetes``: ``taint_only``, ``taint_key``, ``node_condition``, ``drain_timeout_s``, ``attempts``, ...
  (the client configuration comes from ``KUBECONFIG`` or the in-cluster service account);
  ``webhook``: ``url`` (required), ``headers``, ``timeout_s``, ``attempts``, ``verify``, ...;
  ``nvsentinel``: ``target`` (the platform connector's gRPC address, default
  ``unix:///var/run/nvsentinel.sock``), ``reboot_action``, ``store_only``, ``timeout_s``, ...;
  ``alertmanager``: ``url`` (required), ``hold_s``, ``timeout_s``, ``attempts``, ``headers``.

Examples::

    FAULTSTREAM_EXECUTOR_CLUSTERS='{"c1": {"kind": "slurm"}}'
    FAULTSTREAM_EXECUTOR_CLUSTERS='{"c1": {"kind": "slurm", "dry_run": true},
                                    "k8s-a": {"kind": "kubernetes", "taint_only": true},
                                    "c3": {"kind": "webhook", "url": "https://remedy.example/hook",
                                           "headers": {"Authorization": "Bearer ..."}},
                                    "gb200": {"kind": "nvsentinel"}}'
    FAULTSTREAM_EXECUTOR_CLUSTERS='{"c1": {"kind": "slurm",
                                           "notify": {"kind": "alertmanager", "url": "http://am:9093"}}}'

:meth:`ExecutorSettings.executor_for` returns the executor of a cluster (built once, then
reused); a cluster without an entry gets :class:`~sinks.executors.dry_run.DryRunExecutor`.
"""

from __future__ import annotations

import inspect
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from schemas.records import RemediationAction
from sinks.executors.alertmanager import AlertmanagerExecutor
from sinks.executors.base import ExecutionResult, Executor
from sinks.executors.dry_run import DryRunExecutor
from sinks.executors.kubernetes import KubernetesExecutor
from sinks.executors.nvsentinel import NVSentinelExecutor
from sinks.executors.slurm import SlurmExecutor
from sinks.executors.webhook import WebhookExecutor

__all__ = ["EXECUTORS", "ExecutorKind", "ClusterExecutor", "ExecutorSettings", "build_executor"]

ExecutorKind = Literal["dry_run", "slurm", "kubernetes", "webhook", "nvsentinel", "alertmanager"]

#: kind -> executor class (the constructor takes the kind's options as keywords).
EXECUTORS: dict[str, type] = {
    "dry_run": DryRunExecutor,
    "slurm": SlurmExecutor,
    "kubernetes": KubernetesExecutor,
    "webhook": WebhookExecutor,
    "nvsentinel": NVSentinelExecutor,
    "alertmanager": AlertmanagerExecutor,
}
#: The kinds a ``notify`` route may name.
NOTIFY_KINDS = ("alertmanager", "webhook")


def _check_options(kind: str, options: dict[str, Any]) -> None:
    """Raise ValueError when ``options`` do not fit ``EXECUTORS[kind]``'s constructor."""
    if kind not in EXECUTORS:
        raise ValueError(f"unknown executor kind {kind!r} (known: {', '.join(EXECUTORS)})")
    try:
        inspect.signature(EXECUTORS[kind]).bind(**options)
    except TypeError as exc:
        params = [p for p in inspect.signature(EXECUTORS[kind]).parameters]
        raise ValueError(f"{kind} executor options {sorted(options)}: {exc} "
                         f"(options: {', '.join(params)})") from None


def build_executor(kind: str, **options: Any) -> Executor:
    """An executor of ``kind`` (a key of :data:`EXECUTORS`) built with ``options``.

    For ``dry_run``, ``would`` may name another kind (``build_executor("dry_run",
    would="slurm")``) or be an executor. Raises ValueError for an unknown kind or options the
    constructor does not take."""
    if kind == "dry_run" and isinstance(options.get("would"), str):
        options = dict(options, would=build_executor(options["would"]))
    _check_options(kind, options)
    return EXECUTORS[kind](**options)


class ClusterExecutor(BaseModel):
    """One cluster's executor entry (see the module docstring): ``kind``, ``dry_run`` and the
    executor's options as extra keys (:attr:`options`)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    kind: ExecutorKind = "dry_run"
    dry_run: bool = False
    notify: "ClusterExecutor | None" = None

    @property
    def options(self) -> dict[str, Any]:
        """The executor's constructor options (every key but ``kind``, ``dry_run``, ``notify``)."""
        return dict(self.model_extra or {})

    @model_validator(mode="after")
    def _options_fit(self) -> "ClusterExecutor":
        _check_options(self.kind, self.options)
        if self.notify is not None and (self.notify.kind not in NOTIFY_KINDS or self.notify.notify is not None):
            raise ValueError(f"notify route of kind {self.notify.kind!r}: expected one of {', '.join(NOTIFY_KINDS)} "
                             "without a notify route of its own")
        return self

    def build(self) -> Executor:
        """The executor this entry describes: ``notify`` actions routed to the ``notify``
        entry's executor when there is one, the whole wrapped in a dry run when ``dry_run``."""
        executor = build_executor(self.kind, **self.options)
        if self.notify is not None:
            executor = NotifyRouted(executor, self.notify.build())
        if self.dry_run and self.kind != "dry_run":
            return DryRunExecutor(would=executor)
        return executor


class NotifyRouted:
    """An executor that hands ``notify`` actions to ``notifier`` (Alertmanager, a webhook) and
    everything else, resumes included, to ``executor``. Its ``name`` is the executor's."""

    def __init__(self, executor: Executor, notifier: Executor) -> None:
        self.executor = executor
        self.notifier = notifier
        self.name = executor.name

    def _for(self, action: RemediationAction) -> Executor:
        return self.notifier if action.action == "notify" else self.executor

    def execute(self, action: RemediationAction) -> ExecutionResult:
        """``notify`` -> the notifier, else the executor."""
        return self._for(action).execute(action)

    def check(self, action: RemediationAction) -> str | None:
        """Why whichever executor ``execute`` would call refuses ``action``'s target, or None."""
        from sinks.executors.base import target_problem

        checker = getattr(self._for(action), "check", None)
        return checker(action) if checker is not None else target_problem(action)

    def plan(self, action: RemediationAction) -> list[str]:
        """The plan of whichever executor ``execute`` would call."""
        return self._for(action).plan(action)

    def resume(self, host: str, reason: str) -> ExecutionResult:
        """The executor's resume."""
        return self.executor.resume(host, reason)

    def plan_resume(self, host: str, reason: str) -> list[str]:
        """The executor's resume plan."""
        return self.executor.plan_resume(host, reason)


class ExecutorSettings(BaseSettings):
    """See the module docstring."""

    model_config = SettingsConfigDict(env_prefix="FAULTSTREAM_EXECUTOR_", extra="ignore")

    clusters: dict[str, ClusterExecutor] = Field(default_factory=dict)

    _built: dict[str, Executor] = PrivateAttr(default_factory=dict)

    def entry_for(self, cluster: str) -> ClusterExecutor:
        """The entry of ``cluster``; a dry run for a cluster without one."""
        return self.clusters.get(cluster) or ClusterExecutor()

    def executor_for(self, cluster: str) -> Executor:
        """The executor of ``cluster`` (built on first use, then the same object)."""
        if cluster not in self._built:
            self._built[cluster] = self.entry_for(cluster).build()
        return self._built[cluster]

    def enabled(self) -> dict[str, str]:
        """cluster -> executor kind of every cluster that really acts (not a dry run)."""
        return {name: e.kind for name, e in sorted(self.clusters.items())
                if e.kind != "dry_run" and not e.dry_run}
