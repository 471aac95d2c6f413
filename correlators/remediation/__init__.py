"""Remediation: from verdicts to guarded, auditable actions.

Pure like the rest of ``correlators``: no Kafka, Faust, ClickHouse, network or clock; the only
file read is the policy YAML (the packaged default through importlib.resources, or a path the
caller gives).

* :mod:`.policy` -- the versioned YAML policy: verdict cause -> actions (defaults derived from
  the NVIDIA XID catalog and the anchors' practice); :func:`load_policy`, :class:`PolicyError`.
* :mod:`.guards` -- circuit breaker, failure-domain and workload budgets, cooldown, escalation,
  verdict quality/finality; each yields a ``GuardResult`` recorded on the action.
* :mod:`.targets` -- targets come from facts: the node-name grammar (:func:`node_name_problem`)
  and :class:`KnownNodes` (allocation, topology, fleet); a host only a log line names is
  evidence, never a target.
* :mod:`.lifecycle` -- states, the transition table, :func:`advance`, :func:`fold`,
  :class:`LifecycleError`.
* :mod:`.engine` -- :class:`RemediationEngine`: verdicts, commands, certifications and executor
  reports in, ``RemediationAction`` transition records out; state round-trips as JSON.
* :mod:`.bisection` -- NVCRE-style screen/halve/pair planning (:func:`plan_screen`) and an
  adaptive simulator (:func:`bisect`).
"""

from correlators.remediation.bisection import Bisection, bisect, plan_screen, screen_groups
from correlators.remediation.engine import RemediationEngine, UnknownActionError
from correlators.remediation.guards import FailureDomains, GuardSettings
from correlators.remediation.targets import KnownNodes, node_name_problem, valid_node_name
from correlators.remediation.lifecycle import TERMINAL, TRANSITIONS, LifecycleError, advance, fold
from correlators.remediation.policy import (
    DISRUPTIVE,
    SEVERITY,
    Policy,
    PolicyAction,
    PolicyError,
    Rule,
    load_policy,
    parse_policy,
    verdict_facts,
)

__all__ = [
    "Bisection",
    "DISRUPTIVE",
    "FailureDomains",
    "GuardSettings",
    "KnownNodes",
    "LifecycleError",
    "Policy",
    "PolicyAction",
    "PolicyError",
    "RemediationEngine",
    "Rule",
    "SEVERITY",
    "TERMINAL",
    "TRANSITIONS",
    "UnknownActionError",
    "advance",
    "bisect",
    "fold",
    "load_policy",
    "node_name_problem",
    "parse_policy",
    "plan_screen",
    "screen_groups",
    "valid_node_name",
    "verdict_facts",
]
