"""Code hooks of the scheduler rules (``sched.yaml``): Slurm node reasons and ``scontrol show``
blocks.

Sources (SchedMD/slurm, releases 20.11 to 25.05 and master): the node reasons slurmctld sets
itself (``src/slurmctld/node_mgr.c`` ``validate_node_specs``: "Low RealMemory (reported:%lu <
%.2f%% of configured:%lu)", "Low socket*core*thread count", "Low CPUs", "Low TmpDisk", "Prolog
error", "Job env setup error", "Node unexpectedly rebooted"; ``ping_nodes.c``: "Not responding";
``src/interfaces/gres.c`` (``src/common/gres.c`` before 23.02) ``_node_config_validate``:
"gres/gpu count reported lower than configured (7 < 8)", "gres/gpu:h100 count too low (7 < 8)",
"gres/gpu count changed and jobs are using them (8 != 7)"; ``proc_req.c``: "batch job complete
failure"; ``agent.c``: "Prolog/Epilog failure", "Duplicate jobid"; ``job_mgr.c``: "Epilog
error"; ``power_save.c``: "ResumeTimeout reached", "reboot timed out"; ``slurm_errno.c``:
"Kill task failed"), and the ``scontrol show node`` / ``scontrol show job`` layouts
(``src/api/node_info.c`` ``slurm_sprint_node_table``, ``src/scontrol/info_job.c``: a first
``NodeName=``/``JobId=`` line, then ``   Key=Value ...`` lines; a node's ``Reason=<text>
[<user>@<time>]``; a job's ``Reason`` with white space replaced by ``_``).
"""

from __future__ import annotations

import errno as _errno_mod
import os
import re
from typing import TYPE_CHECKING

from correlators.rules.code import SIGNAL_NAMES, Draft, hook

if TYPE_CHECKING:  # pragma: no cover
    from correlators.rules import Rule
    from schemas.records import Observation

#: (literal in a node reason, reason_kind), first hit wins. Admin reasons match none: "other".
REASON_KINDS: tuple[tuple[str, str], ...] = (
    ("count reported lower than configured", "gres_low"),
    ("count too low", "gres_low"),
    ("count changed and jobs are using them", "gres_changed"),
    ("Kill task failed", "kill_task_failed"),
    ("Not responding", "not_responding"),
    ("unexpectedly rebooted", "unexpected_reboot"),
    ("Job env setup error", "prolog_error"),
    ("Prolog/Epilog failure", "prolog_error"),
    ("Prolog error", "prolog_error"),
    ("Epilog error", "epilog_error"),
    ("batch job complete failure", "batch_complete_failure"),
    ("Low RealMemory", "low_memory"),
    ("Low socket*core*thread count", "low_cpu"),
    ("Low CPUs", "low_cpu"),
    ("Bad core count", "low_cpu"),
    ("Low TmpDisk", "low_tmp_disk"),
    ("CoreSpec differ", "config_mismatch"),
    ("ResumeTimeout reached", "resume_timeout"),
    ("reboot timed out", "reboot_timeout"),
    ("Duplicate jobid", "duplicate_jobid"),
)

_GRES_COUNT = re.compile(
    r"gres/(?P<gres>\w+)(?::(?P<gres_type>[\w.-]+))? count (?:reported lower than configured|too low"
    r"|changed and jobs are using them) \((?P<reported>\d+) (?:<|!=) (?P<configured>\d+)\)")
_LOW_MEMORY = re.compile(r"Low RealMemory \(reported:(?P<reported>\d+) < [\d.]+% of configured:(?P<configured>\d+)\)")


def reason_kind(reason: str) -> str:
    """Classify a Slurm node reason text (comma-joined reasons allowed) -> a ``reason_kind``
    (``gres_low``, ``kill_task_failed``, ``not_responding``, ... or ``other``)."""
    for literal, kind in REASON_KINDS:
        if literal in reason:
            return kind
    return "other"


def classify_reason(draft: Draft) -> None:
    """Set ``reason_kind`` (and, for GRES/memory reasons, ``gres``, ``gres_type``, ``reported``,
    ``configured``: counts, memory in MiB) on ``draft`` from its ``reason`` attribute."""
    reason = str(draft.attributes.get("reason") or "")
    if not reason:
        return
    draft.attributes["reason_kind"] = reason_kind(reason)
    m = _GRES_COUNT.search(reason) or _LOW_MEMORY.search(reason)
    if m:
        for k, v in m.groupdict().items():
            if v is None:
                continue
            draft.attributes[k] = int(v) if k in ("reported", "configured") else v


_STATE_SET = re.compile(r"node (?P<node>[\w.-]+) state set to (?P<state>[A-Z_]+)")


@hook("slurm_node_reason")
def slurm_node_reason(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """``reason_kind`` and the counts of a node reason (see :func:`classify_reason`). The
    rule is exclusive, so a ``... state set to X`` line of the same node in the record (how
    slurmctld's update_node and connectors/slurm.py print a drain) gives the ``state``."""
    classify_reason(draft)
    if "state" not in draft.attributes:
        for m in _STATE_SET.finditer(obs.body or ""):
            if m["node"] == draft.attributes.get("node"):
                draft.attributes["state"] = m["state"]
                break
    return [draft]


# --------------------------------------------------------------------------- scontrol show

_KV = re.compile(r"(?:^|(?<=\s))(?P<key>[A-Z][A-Za-z_:]*)=(?P<val>\S*)")
_NODE_REASON = re.compile(r"^\s*Reason=(?P<reason>.*?)(?: \[(?P<user>[^@\]\s]+)@(?P<at>[^\]]+)\])?\s*$", re.M)
#: base states of ``scontrol show node`` that are out of service
_BAD_BASE = {"DOWN", "FUTURE", "UNKNOWN"}
_BAD_FLAGS = ("DRAIN", "FAIL", "NOT_RESPONDING", "INVALID_REG", "REBOOT_ISSUED")


def _keys(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for m in _KV.finditer(text):
        out.setdefault(m["key"], m["val"])
    return out


@hook("scontrol_node")
def scontrol_node(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """One ``scontrol show node`` block -> a ``sched.node_state`` when the node is out of
    service (base state DOWN/FUTURE/UNKNOWN, flags DRAIN/FAIL, a ``*`` = not responding) or
    carries a reason. attrs: node, state (DOWN, DRAIN, FAIL or the base state), state_raw
    (``DOWN*+DRAIN``), reason, reason_user, reason_time (as printed), reason_kind, gres."""
    body = obs.body or ""
    text = body[match.start():match.end()] if match else body
    kv = _keys(text)
    node = kv.get("NodeName")
    raw = kv.get("State", "")
    if not node or not raw or "Owner" not in kv:
        return []  # slurm.conf NodeName lines (State=UNKNOWN/FUTURE/CLOUD) have no Owner=
    parts = raw.split("+")
    base = parts[0].rstrip("*~#!%$@^-")
    flags = {p.rstrip("*~#!%$@^-") for p in parts[1:]}
    not_responding = parts[0].endswith("*")
    rm = _NODE_REASON.search(text)
    reason = rm["reason"].strip() if rm and rm["reason"].strip() not in ("", "(null)") else ""
    if base in _BAD_BASE:
        state = "DOWN" if base == "DOWN" else base
    elif "DRAIN" in flags or base in ("DRAINED", "DRAINING", "DRAIN"):
        state = "DRAIN"
    elif "FAIL" in flags or base == "FAIL":
        state = "FAIL"
    else:
        state = base
    if not (reason or not_responding or state in ("DOWN", "DRAIN", "FAIL", "FUTURE", "UNKNOWN")
            or any(f in flags for f in _BAD_FLAGS)):
        return []  # a node in service
    draft.host = node
    draft.attributes.update(node=node, state=state, state_raw=raw)
    if not_responding:
        draft.attributes["not_responding"] = True
    if reason:
        draft.attributes["reason"] = reason
        if rm["user"]:
            draft.attributes["reason_user"] = rm["user"]
        if rm["at"]:
            draft.attributes["reason_time"] = rm["at"]
        classify_reason(draft)
    elif not_responding:
        draft.attributes["reason_kind"] = "not_responding"
    if kv.get("Gres"):
        draft.attributes["gres"] = kv["Gres"]
    return [draft]


#: terminal or stuck job states ``scontrol show job`` prints that mean a failed attempt
_JOB_FAILED = {"FAILED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
               "PREEMPTED", "CANCELLED", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"}
#: job reasons (``job_state_reason_string`` / state_desc) that mean a failure while PENDING
_PENDING_FAILURE = ("launch_failed_requeued_held", "JobHeldAdmin", "BadConstraints", "NodeDown",
                    "Prolog", "user_env_retrieval_failed_requeued_held", "JobLaunchFailure")


@hook("scontrol_job")
def scontrol_job(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """One ``scontrol show job`` block -> a ``sched.job_state`` for a failed/ended attempt
    (JobState FAILED, NODE_FAIL, TIMEOUT, OUT_OF_MEMORY, PREEMPTED, CANCELLED, ...) or a job
    held after a launch failure. attrs: job_id, state, reason, exit_code ("1:0"),
    failed_node, nodes, batch_host, restarts (int). COMPLETED/RUNNING/PENDING jobs give none."""
    body = obs.body or ""
    text = body[match.start():match.end()] if match else body
    kv = _keys(text)
    job, state = kv.get("JobId"), kv.get("JobState", "")
    reason = kv.get("Reason", "")
    if not job or not state:
        return []
    pending_failure = state in ("PENDING", "REQUEUE_HOLD") and any(r in reason for r in _PENDING_FAILURE)
    if state not in _JOB_FAILED and not pending_failure:
        return []
    draft.attributes.update(job_id=job, state=state, source="scontrol")
    if reason and reason != "None":
        draft.attributes["reason"] = reason
    for key, attr in (("ExitCode", "exit_code"), ("FailedNode", "failed_node"), ("NodeList", "nodes"),
                      ("BatchHost", "batch_host")):
        if kv.get(key) and kv[key] != "(null)":
            draft.attributes[attr] = kv[key]
    if kv.get("Restarts", "").isdigit():
        draft.attributes["restarts"] = int(kv["Restarts"])
    if "failed_node" in draft.attributes:
        draft.host = draft.attributes["failed_node"]
    return [draft]


# --------------------------------------------------------------------------- slurmctld / srun lines


@hook("slurm_job_node_fail")
def slurm_job_node_fail(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """slurmctld's node-failure lines about a job -> ``sched.job_state`` (state NODE_FAIL or
    REQUEUED; reason node_failure or batch_missing; node)."""
    assert match is not None
    a = draft.attributes
    g = match.groupdict()
    for k in ("kill_job", "kill_node", "requeue_job", "batch_job", "batch_node", "requeued"):
        a.pop(k, None)
    if g["kill_job"]:
        a.update(job_id=g["kill_job"], state="NODE_FAIL", node=g["kill_node"], reason="node_failure")
        draft.host = g["kill_node"]
    elif g["requeue_job"]:
        a.update(job_id=g["requeue_job"], state="REQUEUED", reason="node_failure")
    else:
        a.update(job_id=g["batch_job"], state="REQUEUED" if g["requeued"] else "NODE_FAIL",
                 node=g["batch_node"], reason="batch_missing")
        draft.host = g["batch_node"]
    return [draft]


@hook("slurm_step_cancelled")
def slurm_step_cancelled(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """slurmstepd's ``*** STEP/JOB ... ***`` banner: ``reason`` is time_limit, preemption,
    node_failure, requeue, task_failure, signal (+ signal_name), failed, uncorrectable_memory,
    or cancelled (no DUE TO: scancel / a signal); ``time`` is the banner's time as printed."""
    assert match is not None
    a = draft.attributes
    if a.pop("failed", None):
        a["reason"] = "failed"
    elif a.pop("ume", None):
        a["reason"] = "uncorrectable_memory"
        a["time"] = a.pop("ume_time", None) or a.get("time")
    elif "reason" not in a:
        a["reason"] = "cancelled"
    a.pop("ume_time", None)
    if a.get("time") is None:
        a.pop("time", None)
    if a.get("reason") != "signal":
        a.pop("signal_name", None)
    return [draft]


#: strsignal() texts (glibc) srun prints for a task killed by a signal
_STRSIGNAL = {"Hangup": 1, "Interrupt": 2, "Quit": 3, "Illegal instruction": 4,
              "Trace/breakpoint trap": 5, "Aborted": 6, "Bus error": 7, "Floating point exception": 8,
              "Killed": 9, "User defined signal 1": 10, "Segmentation fault": 11,
              "User defined signal 2": 12, "Broken pipe": 13, "Terminated": 15}


@hook("srun_task_exit")
def srun_task_exit(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """srun's task-exit line -> ``sched.task_exit`` (tasks, exit_code or signal/signal_name,
    core) or, for SIG_OOM ('Out Of Memory'), ``host.oom_kill`` (cgroup OOM of the step)."""
    a = draft.attributes
    text = a.pop("signal_text", None)
    if a.pop("oom", None):
        draft.type = "host.oom_kill"
        a.update(cgroup=True, source="srun")
        a.pop("core", None)
        return [draft]
    draft.type = "sched.task_exit"
    if text:
        sig = _STRSIGNAL.get(text)
        if sig is not None:
            a["signal"] = sig
            a["signal_name"] = SIGNAL_NAMES.get(sig, f"SIG{sig}")
    else:
        a.pop("core", None)
    return [draft]


@hook("slurmd_config_error")
def slurmd_config_error(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """slurmd configuration/registration failures -> ``sched.config_error`` with ``code``
    node_config_differs, register_failed or gres_conf_parse and ``detail``."""
    a = draft.attributes
    hw, reg, parse = a.pop("hw", None), a.pop("reg_detail", None), a.pop("parse", None)
    hw_detail, parse_detail = a.pop("hw_detail", None), a.pop("parse_detail", None)
    if hw:
        a.update(code="node_config_differs", detail=hw_detail)
    elif reg:
        a.update(code="register_failed", detail=reg)
    elif parse:
        a.update(code="gres_conf_parse", detail=parse_detail)
    return [draft]


#: strerror(3) text (what %m prints) -> errno name, from the C library's own table
_ERRNO_BY_STRERROR: dict[str, str] = {os.strerror(n): name for n, name in sorted(_errno_mod.errorcode.items())}
#: slurmd's staged batch script: <SlurmdSpoolDir>/job%05u/slurm_script (mgr.c _batch_script_path)
_BATCH_SCRIPT = re.compile(r"^(?P<spool>.*)/job\d+(?:\.\d+)?/slurm_script$")


@hook("slurm_execve")
def slurm_execve(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """slurmstepd could not exec a task or script -> ``sched.config_error`` with ``code``
    batch_script_missing (ENOENT on slurmd's staged ``.../jobN/slurm_script``: the node's spool
    state), batch_script_noexec (EACCES there: a noexec spool), bad_interpreter,
    script_execve_failed (TaskProlog/TaskEpilog and other scripts run as the user) or
    execve_failed (the user's program); ``errno`` (the text) and ``errno_name``; ``spool``
    for the batch script."""
    a = draft.attributes
    script, script_errno = a.pop("script", None), a.pop("script_errno", None)
    if script:
        a.update(code="script_execve_failed", script=script, errno=script_errno)
    text = str(a.get("errno") or "").strip().rstrip(".")
    name = _ERRNO_BY_STRERROR.get(text)
    if name:
        a["errno_name"] = name
    if script:
        return [draft]
    if a.get("interpreter") is not None:
        a["code"] = "bad_interpreter"
        return [draft]
    program = str(a.get("program") or "").strip()
    m = _BATCH_SCRIPT.match(program)
    if m and name in ("ENOENT", "EACCES"):
        a["code"] = "batch_script_missing" if name == "ENOENT" else "batch_script_noexec"
        a["spool"] = m["spool"] or "/"
    else:
        a["code"] = "execve_failed"
    return [draft]


# --------------------------------------------------------------------------- node-side failures
# (issue 33: a failure on a node belongs to the node the line names, through the scheduler's
# declared-aggregator host mechanism of correlators/identity.py)

#: slurm_strerror() texts srun prints after "Task launch for <step> failed on node <n>: "
#: (src/common/slurm_errno.c) -> (event type, code)
LAUNCH_ERRORS: dict[str, tuple[str, str]] = {
    "Job credential expired": ("sched.config_error", "cred_expired"),
    "Invalid job credential": ("sched.config_error", "cred_invalid"),
    "Job credential revoked": ("sched.config_error", "cred_revoked"),
    "Job credential replayed": ("sched.config_error", "cred_replayed"),
    "Job prolog failed": ("sched.prolog_epilog_error", ""),
    "Invalid generic resource (gres) specification": ("sched.config_error", "gres_mismatch"),
    "Invalid GRES specification (with and without type identification)": ("sched.config_error", "gres_mismatch"),
    "Slurmd could not set up environment for batch job": ("sched.config_error", "env_setup_failed"),
    "Slurmd could not execve job": ("sched.config_error", "execve_failed"),
    "Invalid authentication credential": ("sched.config_error", "auth_failed"),
}


@hook("slurm_launch_failed")
def slurm_launch_failed(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """``Task launch for StepId=<s> failed on node <n>: <slurm_strerror>`` (libslurm
    step_launch.c): the node srun names is the event's host (taken from the scheduler's records
    for a node of the allocation, correlators/identity.py); the error text picks the type and
    ``code`` (:data:`LAUNCH_ERRORS`; anything else: ``launch_failed``)."""
    a = draft.attributes
    detail = str(a.get("detail", "")).strip()
    etype, code = LAUNCH_ERRORS.get(detail, ("sched.config_error", "launch_failed"))
    draft.type = etype
    if etype == "sched.prolog_epilog_error":
        a["phase"] = "prolog"
    else:
        a["code"] = code
    return [draft]


#: munge_strerror() texts (munge src/libmunge/strerror.c) Slurm's auth/cred munge plugins print
#: after "Munge decode failed: " -> code
MUNGE_ERRORS: tuple[tuple[str, str], ...] = (
    ("Expired credential", "munge_expired"),
    ("Rewound credential", "munge_rewound"),
    ("Replayed credential", "munge_replayed"),
    ("Unauthorized credential", "munge_unauthorized"),
    ("Invalid credential", "munge_invalid"),
    ("Invalid message format", "munge_invalid"),
    ("Bad credential version", "munge_invalid"),
    ("Failed to access", "munge_socket"),
    ("Socket communication error", "munge_socket"),
    ("Failed to connect to", "munge_socket"),
)


@hook("slurm_munge")
def slurm_munge(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """``Munge decode failed: <munge_strerror>`` (auth_munge.c / cred_munge.c): ``code`` from
    the text (:data:`MUNGE_ERRORS`, else ``munge_error``). Read from the scheduler's own log it
    names no node (the sender is on the next ``auth_g_verify`` line): ``on_controller: true``,
    context for the line that names the node, never a cause of its own."""
    from correlators.identity import is_aggregator

    a = draft.attributes
    if a.pop("clocks", None):
        a["detail"] = "Rewound credential"
    detail = str(a.get("detail", ""))
    a["code"] = next((code for text, code in MUNGE_ERRORS if detail.startswith(text)), "munge_error")
    if draft.host is None and is_aggregator(obs.host, obs.kind, obs.attributes):
        a["on_controller"] = True
    return [draft]


@hook("slurm_nodelist_hosts")
def slurm_nodelist_hosts(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """A line naming a Slurm node set (``Prolog/Epilog failure on nodes node-a[01-02]``): one
    event per node, each with that node as its in-line host (kept only for nodes of the
    allocation, correlators/identity.py)."""
    from dataclasses import replace

    from correlators.hostlist import expand_hostlist

    expr = draft.attributes.get("nodelist")
    try:
        nodes = expand_hostlist(str(expr)) if expr else []
    except ValueError:
        nodes = []
    if len(nodes) <= 1 or len(nodes) > 64:
        if len(nodes) == 1 and draft.host is None:
            draft.host = nodes[0]
        return [draft]
    return [replace(draft, host=node, attributes=dict(draft.attributes)) for node in nodes]
