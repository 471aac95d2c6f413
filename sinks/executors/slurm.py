"""Remediation through Slurm's ``scontrol`` (tested against Slurm 22.05).

=====================  ======================================================================
action                 what runs (argument lists, never a shell)
=====================  ======================================================================
cordon, drain          ``scontrol update NodeName=<host> State=DRAIN Reason=<reason>``
reboot                 ``scontrol reboot ASAP nextstate=DOWN reason=<reason> <host>``
notify                 nothing (ok): notifications are not the scheduler's business
anything else          nothing; ``ok=False`` ``unsupported by slurm executor``
resume(host)           ``scontrol update NodeName=<host> State=RESUME``
=====================  ======================================================================

Slurm has one way to take a node out of service, ``State=DRAIN``: no new jobs start on it and
running jobs are *allowed to finish* (the node shows ``DRAINING`` until they do, then
``DRAINED``). So ``cordon`` and ``drain`` both drain; jobs are never killed here, which leaves
them time to checkpoint. ``reboot ASAP`` drains the node too, reboots it through slurm.conf's
``RebootProgram`` once idle, and ``nextstate=DOWN`` keeps it out of service after the reboot
until :meth:`SlurmExecutor.resume` -- called when a certification passed -- returns it
(``scontrol`` man page, 22.05: ``reboot [ASAP] [nextstate={RESUME|DOWN}] [reason=<reason>]
{ALL|<NodeList>}``). A Slurm without ``RebootProgram`` rejects the reboot ("RebootProgram isn't
defined"), which is reported as ``ok=False``.

The node name is the faultstream host name (the name Slurm knows the node by). It is checked
before anything runs (:meth:`SlurmExecutor.check`): a valid node name
(:func:`correlators.remediation.targets.node_name_problem`) has no hostlist syntax -- no
``[``, ``]``, ``,``, spaces or ``=`` -- and is never ``ALL``, so it is a hostlist of exactly
that one node and cannot add a ``key=value`` to the command; anything else is refused
(``ok=False``, nothing run). ``scontrol`` gets an argument list (run by
:class:`transport.slurm.SlurmClient`, the Slurm client the Slurm connector uses too: no
shell), so no shell quoting applies or is added.

**The reason.** ``Reason=faultstream <action_id>: <action.reason>``, sanitised by
:func:`slurm_reason`:

* arguments go to ``scontrol`` as a list, so there is no shell quoting -- and no quotes may be
  added: ``scontrol`` stores them literally (``Reason="x"`` keeps the ``"``; soperator PR 2955
  hit exactly that), so ``"``, ``'``, `````` and ``\\`` are replaced by ``_``;
* control characters (newlines, tabs) become spaces and runs of spaces collapse: a newline in a
  reason breaks ``scontrol -o show node``'s one-line output;
* the result is cut to :data:`REASON_MAX_BYTES` (255) bytes of UTF-8 at a character boundary:
  slurmctld accepts longer reasons, but slurmdbd stores node events (``sacctmgr show event``) in
  a ``TINYTEXT`` column (255 bytes, ``as_mysql``'s ``event_table_fields``) and MySQL truncates
  or rejects longer ones;
* an empty reason is never sent (slurmctld refuses ``State=DRAIN`` without one).

**Verification.** After every state change the executor reads ``scontrol -o show node <host>``
back (22.05's Debian build has no ``--json``) and checks the state: ``DRAIN`` among its flags
after a drain (``IDLE+DRAIN``, ``MIXED+DRAIN``), ``REBOOT`` or ``DRAIN`` after a reboot request,
no ``DRAIN``/``DOWN``/``FAIL`` after a resume. The state (and the stored reason) goes into
``detail``; a command that succeeded but left another state is ``ok=False``.

**Failures.** A missing binary, a non-zero exit, a timeout: ``ok=False`` with ``scontrol``'s own
message. "Unable to contact slurm controller", "Socket timed out" and timeouts are transient and
retried (tenacity, ``attempts`` times). Resuming a node that is already in service is ``ok=True``
(slurmctld answers "Invalid node state specified" for ``IDLE -> RESUME``; the read-back shows
it is in service).
"""

from __future__ import annotations

import logging
import re

from schemas.records import RemediationAction
from correlators.remediation.targets import node_name_problem, shown
from sinks.executors.base import (
    REFUSED,
    UNSUPPORTED,
    ExecutionResult,
    TransientError,
    action_host,
    quote_argv,
    retrying,
    target_problem,
)
from transport.slurm import SlurmClient, SlurmCommandError, SlurmError, SlurmRun, SlurmTimeout, parse_scontrol_nodes

__all__ = ["SlurmExecutor", "slurm_reason", "REASON_MAX_BYTES", "SUPPORTED"]

log = logging.getLogger("faultstream.executor.slurm")

#: Longest reason stored, in UTF-8 bytes: slurmdbd's node-event ``reason`` is a TINYTEXT.
REASON_MAX_BYTES = 255

#: The actions this executor carries out; others are ``unsupported``.
SUPPORTED = frozenset({"cordon", "drain", "reboot", "notify"})

#: ``scontrol`` messages of a failure that may go away by itself (controller restarting).
_TRANSIENT = re.compile(
    r"Unable to contact slurm controller|Socket timed out|Zero Bytes were transmitted|"
    r"Connection refused|Resource temporarily unavailable|Slurm backup controller in standby",
    re.IGNORECASE,
)
_QUOTES = re.compile(r"[\"'`\\]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
_SPACES = re.compile(r" {2,}")


def slurm_reason(text: str, max_bytes: int = REASON_MAX_BYTES) -> str:
    """``text`` made safe as a Slurm node reason (see the module docstring): quotes and
    backslashes -> ``_``, control characters -> one space, spaces collapsed, trimmed, cut to
    ``max_bytes`` UTF-8 bytes without splitting a character. ``"faultstream"`` if nothing is
    left (Slurm refuses an empty reason)."""
    clean = _SPACES.sub(" ", _CONTROL.sub(" ", _QUOTES.sub("_", text))).strip()
    data = clean.encode("utf-8")
    if len(data) > max_bytes:
        clean = data[:max_bytes].decode("utf-8", errors="ignore").rstrip()
    return clean or "faultstream"


class _CommandFailed(Exception):
    """A non-transient failure: the message is the detail."""


class SlurmExecutor:
    """Remediation through ``scontrol`` (see the module docstring).

    ``scontrol``: the binary (a name on ``PATH`` or a path). ``timeout_s``: the limit of one
    ``scontrol`` call (seconds). ``attempts``: tries of a transiently failing call;
    ``retry_wait_s``/``retry_max_wait_s``: the exponential wait between tries (seconds)."""

    name = "slurm"

    def __init__(self, scontrol: str = "scontrol", *, timeout_s: float = 30.0, attempts: int = 3,
                 retry_wait_s: float = 1.0, retry_max_wait_s: float = 10.0):
        self.scontrol = scontrol
        self.timeout_s = timeout_s
        self.client = SlurmClient(scontrol=scontrol, timeout_s=timeout_s)
        self.attempts = attempts
        self.retry_wait_s = retry_wait_s
        self.retry_max_wait_s = retry_max_wait_s

    # -- planning ---------------------------------------------------------------------------

    def _reason(self, action: RemediationAction) -> str:
        text = f"faultstream {action.action_id}"
        if action.reason.strip():
            text += f": {action.reason}"
        return slurm_reason(text)

    def check(self, action: RemediationAction) -> str | None:
        """Why this executor refuses ``action``'s target (see the module docstring), or None."""
        problem = target_problem(action)
        return f"{REFUSED.format(name=self.name)}: {problem}" if problem else None

    def _argv(self, action: RemediationAction) -> list[str] | None:
        host = action_host(action)
        if host is None or node_name_problem(host) is not None:
            return None
        if action.action in ("cordon", "drain"):
            return [self.scontrol, "update", f"NodeName={host}", "State=DRAIN",
                    f"Reason={self._reason(action)}"]
        if action.action == "reboot":
            return [self.scontrol, "reboot", "ASAP", "nextstate=DOWN",
                    f"reason={self._reason(action)}", str(host)]
        return None

    def plan_argv(self, action: RemediationAction) -> list[list[str]]:
        """The argument lists ``execute(action)`` would run, exactly as given to
        ``subprocess.run`` (none for ``notify``, unsupported actions and refused targets)."""
        if action.action not in SUPPORTED or self.check(action):
            return []
        argv = self._argv(action)
        return [argv] if argv else []

    def plan(self, action: RemediationAction) -> list[str]:
        """The ``scontrol`` command ``execute(action)`` would run, shell-quoted for reading
        (none for ``notify``, unsupported actions and refused targets)."""
        return [quote_argv(argv) for argv in self.plan_argv(action)]

    def plan_resume_argv(self, host: str, reason: str) -> list[list[str]]:
        """The argument list ``resume(host)`` would run ([] for an invalid node name)."""
        return [] if node_name_problem(host) else [self._resume_argv(host)]

    def plan_resume(self, host: str, reason: str) -> list[str]:
        """The ``scontrol`` command ``resume(host)`` would run, shell-quoted for reading."""
        return [quote_argv(argv) for argv in self.plan_resume_argv(host, reason)]

    def _resume_argv(self, host: str) -> list[str]:
        return [self.scontrol, "update", f"NodeName={host}", "State=RESUME"]

    # -- running ----------------------------------------------------------------------------

    def _run_once(self, argv: list[str]) -> SlurmRun:
        try:
            run = self.client.run(argv)
        except SlurmCommandError as exc:
            what = {"not found": "scontrol not found", "not executable": "scontrol not executable"}.get(
                exc.reason, "cannot run scontrol")
            raise _CommandFailed(f"{what}: {argv[0]} ({exc.strerror})") from exc
        except SlurmTimeout as exc:
            raise TransientError(f"{quote_argv(argv[:3])} timed out after {self.timeout_s:g} s") from exc
        if run.returncode != 0 and _TRANSIENT.search(run.message):
            raise TransientError(run.message)
        return run

    def _run(self, argv: list[str]) -> SlurmRun:
        """Run ``argv`` (retrying transient failures); raises ``_CommandFailed`` or
        ``TransientError`` (retries exhausted) for a call that could not be made."""
        return retrying(lambda: self._run_once(argv), attempts=self.attempts,
                        wait_s=self.retry_wait_s, max_wait_s=self.retry_max_wait_s)

    def node(self, host: str) -> dict[str, str] | None:
        """``scontrol -o show node <host>`` as ``{key: value}`` (``State``, ``Reason`` without
        slurmctld's `` [user@time]`` suffix, ...), or None when the node is unknown or
        ``scontrol`` failed."""
        try:
            run = self._run([self.scontrol, "-o", "show", "node", host])
        except (_CommandFailed, TransientError):
            return None
        if run.returncode != 0:
            return None
        try:
            fields = parse_scontrol_nodes(run.stdout).get(host)
        except SlurmError:
            return None
        if fields is not None and "Reason" in fields:
            fields["Reason"] = re.sub(r"\s*\[[^\]@]*@[^\]]*\]$", "", fields["Reason"])
        return fields

    @staticmethod
    def _flags(state: str) -> tuple[str, set[str]]:
        """``IDLE+DRAIN*`` -> (``IDLE``, {``DRAIN``}); suffix markers (``*~#!%$@^-``) dropped."""
        parts = [p.rstrip("*~#!%$@^-").upper() for p in state.split("+")]
        return parts[0], set(parts[1:])

    def _describe(self, host: str, fields: dict[str, str] | None) -> str:
        if fields is None:
            return f"{host}: state could not be read back"
        text = f"{host} State={fields.get('State', '?')}"
        if fields.get("Reason"):
            text += f" Reason={fields['Reason']}"
        return text

    def execute(self, action: RemediationAction) -> ExecutionResult:
        """Carry out ``action`` (see the module docstring); never raises for an operational
        failure."""
        def result(ok: bool, detail: str, commands: list[str] | None = None) -> ExecutionResult:
            res = ExecutionResult(ok=ok, detail=detail, executor=self.name, commands=commands or [])
            log.log(logging.INFO if ok else logging.WARNING, "slurm %s %s: %s", action.action,
                    action_host(action), detail,
                    extra={"action_id": action.action_id, "action": action.action,
                           "host": action_host(action), "ok": ok, "commands": res.commands})
            return res

        if action.action == "notify":
            return result(True, "notify: nothing to do on Slurm")
        if action.action not in SUPPORTED:
            return result(False, UNSUPPORTED.format(name=self.name) + f": {action.action}")
        refused = self.check(action)
        if refused:
            return result(False, refused)
        host = action_host(action)
        if not host:
            return result(False, f"{action.action} needs a target host (target: "
                                  f"{action.target.model_dump(exclude_none=True)})")
        argv = self._argv(action)
        assert argv is not None
        commands = [quote_argv(argv)]
        try:
            run = self._run(argv)
        except (_CommandFailed, TransientError) as exc:
            return result(False, str(exc), commands)
        if run.returncode != 0:
            return result(False, f"{quote_argv(argv[:3])} failed: {run.message}", commands)
        fields = self.node(host)
        base, flags = self._flags(fields.get("State", "")) if fields else ("", set())
        if action.action == "reboot":
            done = bool(flags & {"REBOOT", "REBOOT_REQUESTED", "REBOOT_ISSUED", "DRAIN"}) or base == "REBOOT"
        else:
            done = "DRAIN" in flags or base in ("DRAINED", "DRAINING", "DOWN")
        detail = self._describe(host, fields)
        if not done:
            return result(False, f"scontrol succeeded but the node is not drained: {detail}", commands)
        return result(True, detail, commands)

    def resume(self, host: str, reason: str) -> ExecutionResult:
        """Return ``host`` to service (``State=RESUME``) after a passing certification
        (``reason`` is logged); ``ok=True`` also when it already was in service."""
        invalid = node_name_problem(host)
        argv = self._resume_argv(host)
        commands = [] if invalid else [quote_argv(argv)]

        def result(ok: bool, detail: str) -> ExecutionResult:
            log.log(logging.INFO if ok else logging.WARNING, "slurm resume %s: %s", shown(host), detail,
                    extra={"host": host, "reason": reason, "ok": ok, "commands": commands})
            return ExecutionResult(ok=ok, detail=detail, executor=self.name, commands=commands)

        if invalid:
            return result(False, f"{REFUSED.format(name=self.name)}: {shown(host)} is not a valid node name: {invalid}")

        try:
            run = self._run(argv)
        except (_CommandFailed, TransientError) as exc:
            return result(False, str(exc))
        fields = self.node(host)
        base, flags = self._flags(fields.get("State", "")) if fields else ("", set())
        in_service = fields is not None and base not in ("DOWN", "DRAINED", "DRAINING", "FAIL") \
            and not flags & {"DRAIN", "FAIL"}
        detail = self._describe(host, fields)
        if run.returncode != 0:
            if in_service:
                return result(True, f"already in service: {detail}")
            return result(False, f"{quote_argv(argv[:3])} failed: {run.message}; {detail}")
        if not in_service:
            return result(False, f"scontrol succeeded but the node is not in service: {detail}")
        return result(True, detail)
