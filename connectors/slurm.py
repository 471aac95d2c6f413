"""Slurm connector: job/step state transitions and node state changes -> Observations.

``SlurmConnector(cluster, cursor=CursorStore(...))`` polls the Slurm command-line tools:

* ``sacct --json --allusers -S <since> -E now`` (Slurm 22.05: plugin ``openapi/dbv0.0.38``,
  top-level ``{"meta", "errors", "jobs"}``; per job ``job_id``, ``array.{job_id,task_id}``,
  ``name``, ``partition``, ``account``, ``user``, ``nodes`` (a hostlist expression, or
  ``"None assigned"`` while pending), ``state.{current,reason}``,
  ``time.{submission,start,end}`` (Unix seconds, ``null``/0 when not reached),
  ``exit_code.{status,return_code,signal.signal_id}``, ``tres.allocated[]`` and ``steps[]``
  with ``step.id`` (``"batch"``, ``"extern"``, or an int), ``state``, ``nodes.list``,
  ``tasks.count``, ``task.distribution``, ``time.{start,end}``, ``exit_code``);
* ``sacct -P -n --allusers -o JobID,ExitCode`` over the same window, because 22.05's JSON
  reports ``{"status": "SUCCESS", "return_code": 0}`` for jobs and steps that exited non-zero
  (seen on 22.05.8: ``exit 3`` gives ``FAILED`` with that exit code in JSON and ``3:0`` in the
  text output). The text ``ExitCode`` (``<exit status>:<signal>``) is authoritative; the JSON
  signal is used when the text row is missing;
* ``scontrol -o show node`` (one ``Key=Value`` line per node; 22.05 has no ``--json`` for
  scontrol): ``NodeName``, ``State`` (``IDLE+DRAIN``, ``DOWN*``, ...) and ``Reason`` (always
  last on the line, ``<text> [<user>@<local time>]``).

One Observation (``kind="scheduler_event"``) per **transition**:

* job and step states PENDING -> RUNNING -> COMPLETED / FAILED / CANCELLED / TIMEOUT /
  NODE_FAIL / OUT_OF_MEMORY / PREEMPTED / ...; a job that went through several states between
  two polls yields each of them, timed by Slurm (PENDING at submission, RUNNING at start, the
  final state at end). ``body`` is a row in ``sacct``'s default column format (``JobID JobName
  Partition Account AllocCPUS State ExitCode``), which the ``sched.sacct_row`` rule turns into
  ``sched.job_state`` (that rule knows the final states only: PENDING/RUNNING rows give no
  event, their data is in ``attributes``);
* node state changes (DOWN, DRAIN, FAIL, and the return to service; IDLE <-> ALLOCATED <->
  MIXED while in service are not reported): ``body`` is slurmctld's
  ``update_node: node <node> state set to <STATE>`` line, followed by ``update_node: node
  <node> reason set to: <reason>`` when there is a reason (rules ``sched.slurm_update_node_*``
  give ``sched.node_state``). A node seen for the first time is reported only when it is not
  in service.

Fields: ``observed_at`` is the transition time from Slurm in UTC ns (node changes without a
Slurm time -- the return to service -- use the poll time, ``time_source="transport"``);
``host`` is the node for node changes and single-node steps, ``"_scheduler"`` for jobs and
multi-node steps; ``workload_id`` is the job id (``1001`` or ``1001_7`` for array tasks);
``source`` is ``Source(connector="slurm", instance=cluster)``; ids are content hashes
(:meth:`~schemas.records.Observation.with_id`). ``attributes``: ``job_id`` (``"1001"``,
``"1001.batch"``, ``"1001.0"``), ``step``, ``state``, ``exit_code``, ``signal``,
``exit_status`` (``"3:0"``), ``nodes``, ``start_ns``, ``end_ns``, ``submit_ns``, ``ntasks``,
``tasks_per_node`` and ``ranks`` (``{node: [first, last]}`` for block-distributed steps whose
tasks divide evenly over their nodes), ``reason``, ``name``, ``partition``, ``user``; for
nodes ``node``, ``state``, ``state_raw``, ``reason``, ``reason_user``, ``reason_at_ns``,
``previous_state``.

Resume without loss or duplicates: the cursor (:class:`~connectors.cursor.CursorStore`) holds
the time of the last poll and the last state reported per job, step and node. :meth:`poll`
queries from the last poll time (minus ``overlap_s``) and compares with that state;
:meth:`checkpoint` is the state reached by the last poll; :func:`connectors.runner.run` saves
it (the connector is a :class:`connectors.source.Source`) only after the producer's flush, and
after a failed delivery :meth:`rewind` makes the next poll start from the saved cursor again.
After a crash before the save the next poll re-emits the same observations with the same ids.

The commands run through :class:`transport.slurm.SlurmClient` (argument lists, timeouts), the
client the Slurm remediation executor uses too.
"""

from __future__ import annotations

import json
import logging
import re
import time
from datetime import datetime
from typing import Annotated, Any, Generator, Iterable

import typer

from connectors.command import Shared, connector
from connectors.bundle import SCHEDULER_HOST
from connectors.cursor import CursorStore
from correlators.hostlist import expand_hostlist
from schemas.records import TIME_QUALITY_SECONDS, TIME_QUALITY_TRANSPORT, CoverageEntry, Observation, Source
from transport.slurm import SlurmClient, SlurmError, parse_scontrol_nodes

__all__ = ["SlurmConnector", "SlurmError", "expand_hostlist", "parse_scontrol_nodes", "connect_slurm_cli"]

log = logging.getLogger(__name__)

CURSOR_VERSION = 1
#: Node states (base, upper case) in which a node is in service; flags such as DRAIN, FAIL,
#: MAINTENANCE, NOT_RESPONDING take it out of service whatever the base is.
IN_SERVICE = {"IDLE", "ALLOCATED", "MIXED", "COMPLETING"}
_OUT_FLAGS = ("DRAIN", "FAIL", "MAINT", "NOT_RESPONDING", "POWERED_DOWN", "REBOOT")
_ORDER = {"PENDING": 0, "RUNNING": 1}
_NS = 1_000_000_000



def _ns(seconds: Any) -> int | None:
    """Unix seconds from sacct JSON (int, or null/0 when the time was not reached) -> UTC ns."""
    if isinstance(seconds, (int, float)) and seconds > 0:
        return int(seconds) * _NS
    return None


def _local_iso_to_ns(text: str) -> int | None:
    """``2026-11-30T02:18:14`` in the local time zone of the Slurm tools -> UTC ns."""
    try:
        return int(datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").astimezone().timestamp()) * _NS
    except ValueError:
        return None


def _node_display_state(raw: str) -> str:
    """``IDLE+DRAIN`` -> ``DRAINED``, ``ALLOCATED+DRAIN`` -> ``DRAINING``, ``DOWN*`` -> ``DOWN``,
    ``IDLE+FAIL`` -> ``FAIL``, ``MIXED+FAIL`` -> ``FAILING``, ``IDLE`` -> ``IDLE`` (the names
    slurmctld logs and ``sinfo`` prints)."""
    parts = raw.rstrip("*~#!%$@^-").split("+")
    base = parts[0].rstrip("*~#!%$@^-").upper()
    flags = {p.upper() for p in parts[1:]}
    busy = base in ("ALLOCATED", "MIXED", "COMPLETING")
    if base == "DOWN":
        return "DOWN"
    if "FAIL" in flags:
        return "FAILING" if busy else "FAIL"
    if "DRAIN" in flags:
        return "DRAINING" if busy else "DRAINED"
    if "MAINT" in flags:
        return "MAINT"
    if "NOT_RESPONDING" in flags or raw.endswith("*"):
        return "NOT_RESPONDING"
    return base


def _in_service(raw: str) -> bool:
    parts = raw.split("+")
    base = parts[0].rstrip("*~#!%$@^-").upper()
    if raw.endswith("*"):
        return False
    return base in IN_SERVICE and not any(f.upper().startswith(_OUT_FLAGS) for f in parts[1:])


def _exit_parts(text: str | None, js: dict[str, Any] | None) -> tuple[str | None, int | None, int | None]:
    """-> (``"3:0"``, exit code, signal or None). Text ``ExitCode`` wins over the JSON."""
    if text and re.fullmatch(r"\d+:\d+", text):
        code, sig = (int(x) for x in text.split(":"))
        return text, code, (sig or None)
    js = js or {}
    sig = ((js.get("signal") or {}).get("signal_id")) if js.get("status") == "SIGNALED" else None
    code = js.get("return_code")
    code = code if isinstance(code, int) else 0
    return f"{code}:{sig or 0}", code, sig


def _cpus(tres: Any) -> int:
    for item in tres or []:
        if isinstance(item, dict) and item.get("type") == "cpu" and isinstance(item.get("count"), int):
            return item["count"]
    return 0


def _token(value: Any, default: str = "") -> str:
    text = "" if value is None else str(value)
    text = re.sub(r"\s+", "_", text.strip())
    return text or default


def _sacct_row(job_id: str, name: str, partition: str, account: str, cpus: int, state: str,
               exit_status: str) -> str:
    """A row as ``sacct`` prints its default columns (widths 12/10/10/10/10/10/8)."""
    return (f"{job_id:<12} {_token(name, 'unknown'):>10} {_token(partition):>10} "
            f"{_token(account):>10} {cpus:>10} {state:>10} {exit_status:>8}")


# ---- the connector --------------------------------------------------------------------------------

class SlurmConnector:
    """Poll one Slurm cluster's ``sacct`` and ``scontrol`` for state transitions (see the module
    docstring for the formats and the Observation fields).

    ``cluster`` names the instance (``Source.instance``, ``Observation.cluster``); ``cursor``
    persists the resume state (read here, saved by the runner or :meth:`commit`); ``poll_s`` is
    the pause between polls the CLI gives the runner; ``sacct``/``scontrol`` are the commands
    (names on ``PATH`` or paths). ``lookback_s`` is how
    far back the first poll (empty cursor) looks; ``overlap_s`` how far before the last poll
    time each later poll starts (covers records sacct stores late); ``timeout_s`` bounds each
    command.
    """

    def __init__(self, cluster: str, *, cursor: CursorStore, poll_s: float = 10,
                 sacct: str = "sacct", scontrol: str = "scontrol", lookback_s: int = 3600,
                 overlap_s: int = 300, timeout_s: float = 60) -> None:
        self.cluster = cluster
        self.cursor = cursor
        self.poll_s = poll_s
        self.client = SlurmClient(sacct=sacct, scontrol=scontrol, timeout_s=timeout_s)
        self.lookback_s = lookback_s
        self.overlap_s = overlap_s
        self._source = Source(connector="slurm", instance=cluster)
        self._state: dict[str, Any] | None = None  # state after the last poll (not yet saved)
        self.polls = 0
        self.emitted = 0
        self.last_error: str | None = None

    # -- cursor ---------------------------------------------------------------------------------
    def _load(self) -> dict[str, Any]:
        data = self.cursor.load()  # CursorError on a corrupted file
        if not data:
            return {"version": CURSOR_VERSION, "cluster": self.cluster, "since": None,
                    "jobs": {}, "nodes": {}}
        if data.get("version") != CURSOR_VERSION or data.get("cluster") != self.cluster:
            raise SlurmError(
                f"cursor {self.cursor.path}: written for cluster {data.get('cluster')!r} "
                f"version {data.get('version')!r}, not {self.cluster!r} v{CURSOR_VERSION}")
        data.setdefault("jobs", {})
        data.setdefault("nodes", {})
        return data

    def checkpoint(self) -> dict[str, Any]:
        """The cursor document after the last :meth:`poll`: ``{"version", "cluster", "since"
        (Unix seconds of the last poll), "jobs": {"job:<id>" | "step:<id>": {"state", ...}},
        "nodes": {<node>: {"state", ...}}}``; before the first poll, the saved cursor. Save it
        only once that poll's observations were delivered."""
        return json.loads(json.dumps(self._state if self._state is not None else self._load()))

    def commit(self) -> None:
        """Save :meth:`checkpoint` to the cursor (call after the last poll's observations were
        delivered). No-op before the first poll. Raises ``OSError`` if the cursor cannot be
        written."""
        if self._state is not None:
            self.cursor.save(self._state)

    def rewind(self) -> None:
        """Forget what the polls since the last saved cursor found (their delivery failed):
        the next poll starts from the saved cursor and emits those transitions again, with the
        same ids."""
        self._state = None

    def coverage(self) -> list[CoverageEntry]:
        """One entry ``slurm:<cluster>``: ``present`` once a poll emitted transitions, ``failed``
        when the last poll failed, else ``empty``; ``records`` = transitions emitted."""
        status = "failed" if self.last_error else ("present" if self.emitted else "empty")
        detail = f"{self.polls} polls" + (f"; last error: {self.last_error}" if self.last_error else "")
        return [CoverageEntry(source=f"slurm:{self.cluster}", status=status, records=self.emitted,
                              detail=detail)]

    # -- commands -------------------------------------------------------------------------------
    def _window(self, state: dict[str, Any], now: int) -> tuple[str, str]:
        since = state.get("since")
        start = now - self.lookback_s if since is None else int(since) - self.overlap_s
        fmt = "%Y-%m-%dT%H:%M:%S"  # sacct reads times in its local time zone
        return time.strftime(fmt, time.localtime(start)), time.strftime(fmt, time.localtime(now))

    def fetch_jobs(self, start: str, end: str) -> tuple[list[dict[str, Any]], dict[str, str]]:
        """Run ``sacct --json`` and the text ``ExitCode`` query for ``[start, end]`` (local
        ``YYYY-MM-DDTHH:MM:SS``). Returns (jobs as printed by ``sacct --json``, ``{JobID:
        "code:signal"}``). Raises :class:`SlurmError`."""
        return self.client.sacct_jobs(start, end)

    def fetch_nodes(self) -> dict[str, dict[str, str]]:
        """Run ``scontrol -o show node`` -> :func:`parse_scontrol_nodes`. Raises
        :class:`SlurmError`."""
        return self.client.nodes()

    # -- polling --------------------------------------------------------------------------------
    def poll(self, now: float | None = None) -> list[Observation]:
        """One poll: query Slurm, compare with the state after the previous poll (or the
        committed cursor), return the transitions as Observations ordered by ``observed_at``.
        The new state is kept in memory until :meth:`commit`. ``now`` (Unix seconds) is the
        query's end, default the wall clock. Raises :class:`SlurmError` when a command fails
        and :class:`~connectors.cursor.CursorError` for a corrupted cursor; on error the
        state is unchanged."""
        state = self.checkpoint()
        now_s = int(time.time() if now is None else now)
        start, end = self._window(state, now_s)
        self.polls += 1
        try:
            jobs, codes = self.fetch_jobs(start, end)
            nodes = self.fetch_nodes()
        except SlurmError as exc:
            self.last_error = str(exc)
            raise
        out = self.transitions(state, jobs, codes, nodes, now_s)
        self._state = state
        self.last_error = None
        self.emitted += len(out)
        return out

    def transitions(self, state: dict[str, Any], jobs: list[dict[str, Any]],
                    codes: dict[str, str], nodes: dict[str, dict[str, str]],
                    now_s: int) -> list[Observation]:
        """The pure part of :meth:`poll`: compare ``jobs`` (as ``sacct --json`` prints them),
        ``codes`` (``{JobID: "code:signal"}``) and ``nodes`` (:func:`parse_scontrol_nodes`)
        with ``state`` (the cursor document, updated in place, ``since`` set to ``now_s``) and
        return the transitions ordered by ``observed_at``."""
        out: list[Observation] = []
        seen: set[str] = set()
        for job in jobs:
            out.extend(self._job_transitions(job, codes, state.setdefault("jobs", {}), seen))
        out.extend(self._node_transitions(nodes, state.setdefault("nodes", {}), now_s))
        # forget finished jobs that can no longer come back in a query window
        horizon = now_s - self.overlap_s - 2 * max(self.overlap_s, 60)
        state["jobs"] = {k: v for k, v in state["jobs"].items()
                         if k in seen or not v.get("final") or (v.get("end") or now_s) >= horizon}
        state["since"] = now_s
        out.sort(key=lambda o: (o.observed_at, o.attributes.get("job_id") or "", o.host))
        return out

    def _job_transitions(self, job: dict[str, Any], codes: dict[str, str],
                         seen_state: dict[str, Any], seen: set[str]) -> Iterable[Observation]:
        array = job.get("array") or {}
        base = str(job.get("job_id"))
        if array.get("task_id") is not None and array.get("job_id"):
            base = f"{array['job_id']}_{array['task_id']}"
        t = job.get("time") or {}
        submit_ns, start_ns, end_ns = _ns(t.get("submission")), _ns(t.get("start")), _ns(t.get("end"))
        cur = ((job.get("state") or {}).get("current") or "UNKNOWN").upper()
        reason = (job.get("state") or {}).get("reason")
        nodes = expand_hostlist(job.get("nodes"))
        exit_status, code, sig = _exit_parts(codes.get(base) or codes.get(str(job.get("job_id"))),
                                             job.get("exit_code"))
        common = {
            "name": job.get("name"), "partition": job.get("partition") or None,
            "user": job.get("user"), "submit_ns": submit_ns, "start_ns": start_ns,
            "end_ns": end_ns, "nodes": nodes,
        }
        if reason and reason != "None":
            common["reason"] = reason
        steps = [s for s in job.get("steps") or [] if isinstance(s, dict)]
        layout = self._job_layout(steps, nodes)
        common.update(layout)
        path = [("PENDING", submit_ns)]
        if start_ns is not None and cur != "PENDING":
            path.append(("RUNNING", start_ns))
        if cur not in ("PENDING", "RUNNING"):
            path.append((cur, end_ns or start_ns or submit_ns))
        key = f"job:{base}"
        seen.add(key)
        yield from self._emit(key, base, None, path, cur, submit_ns, end_ns, seen_state, common,
                              exit_status, code, sig, SCHEDULER_HOST, job, _cpus((job.get("tres") or {}).get("allocated")))
        for step in steps:
            sid = str((step.get("step") or {}).get("id"))
            sjid = f"{base}.{sid}"
            st = step.get("time") or {}
            s_start, s_end = _ns(st.get("start")), _ns(st.get("end"))
            s_cur = (step.get("state") or "UNKNOWN").upper()
            s_nodes = list((step.get("nodes") or {}).get("list") or []) or expand_hostlist(
                (step.get("nodes") or {}).get("range"))
            ntasks = (step.get("tasks") or {}).get("count")
            s_exit, s_code, s_sig = _exit_parts(codes.get(sjid), step.get("exit_code"))
            s_common = {
                "name": (step.get("step") or {}).get("name"), "partition": None,
                "user": job.get("user"), "submit_ns": submit_ns, "start_ns": s_start,
                "end_ns": s_end, "nodes": s_nodes, "step": sid,
            }
            s_common.update(self._step_layout(step, s_nodes, ntasks))
            s_path = [("RUNNING", s_start)] if s_start is not None else []
            if s_cur != "RUNNING":
                s_path.append((s_cur, s_end or s_start))
            skey = f"step:{sjid}"
            seen.add(skey)
            host = s_nodes[0] if len(s_nodes) == 1 else SCHEDULER_HOST
            yield from self._emit(skey, sjid, sid, s_path, s_cur, submit_ns, s_end, seen_state,
                                  s_common, s_exit, s_code, s_sig, host, job,
                                  _cpus((step.get("tres") or {}).get("allocated")), workload=base)

    @staticmethod
    def _step_layout(step: dict[str, Any], nodes: list[str], ntasks: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if isinstance(ntasks, int) and ntasks > 0:
            out["ntasks"] = ntasks
            if nodes and ntasks % len(nodes) == 0:
                per = ntasks // len(nodes)
                out["tasks_per_node"] = per
                dist = ((step.get("task") or {}).get("distribution") or "").lower()
                if dist.startswith("block"):
                    out["ranks"] = {n: [i * per, (i + 1) * per - 1] for i, n in enumerate(nodes)}
        return out

    def _job_layout(self, steps: list[dict[str, Any]], nodes: list[str]) -> dict[str, Any]:
        """The job's rank layout = that of its widest numbered (srun) step over all its nodes."""
        best: dict[str, Any] = {}
        for step in steps:
            sid = (step.get("step") or {}).get("id")
            if not isinstance(sid, int):
                continue
            s_nodes = list((step.get("nodes") or {}).get("list") or [])
            lay = self._step_layout(step, s_nodes, (step.get("tasks") or {}).get("count"))
            if sorted(s_nodes) == sorted(nodes) and lay.get("ntasks", 0) > best.get("ntasks", 0):
                best = lay
        return best

    def _emit(self, key: str, job_id: str, step: str | None, path: list[tuple[str, int | None]],
              cur: str, submit_ns: int | None, end_ns: int | None, seen_state: dict[str, Any],
              common: dict[str, Any], exit_status: str, code: int | None, sig: int | None,
              host: str, job: dict[str, Any], cpus: int, workload: str | None = None,
              ) -> Iterable[Observation]:
        prev = seen_state.get(key)
        if prev is not None and prev.get("submit") != submit_ns:
            prev = None  # a requeued job: a new attempt starts from PENDING again
        prev_state = prev.get("state") if prev else None
        if prev_state == cur:
            return
        if prev_state is None:
            todo = path
        elif prev_state in _ORDER:
            todo = [(s, at) for s, at in path if _ORDER.get(s, 2) > _ORDER[prev_state]]
        else:  # an unusual state before (SUSPENDED, REQUEUED, ...): report where it is now
            todo = [p for p in path if p[0] == cur]
        final = cur not in ("PENDING", "RUNNING", "SUSPENDED", "REQUEUED", "RESIZING")
        seen_state[key] = {"state": cur, "submit": submit_ns, "end": (end_ns // _NS) if end_ns else None,
                           "final": final}
        for state, at in todo:
            if at is None:
                continue
            terminal = state == cur and final
            attrs = dict(common)
            attrs.update({"job_id": job_id, "state": state})
            if terminal:
                attrs.update({"exit_status": exit_status, "exit_code": code, "signal": sig})
                status = exit_status
            else:
                attrs["end_ns"] = None
                status = "0:0"
            if state == "PENDING":  # nothing allocated yet
                for k in ("start_ns", "nodes", "ntasks", "tasks_per_node", "ranks"):
                    attrs.pop(k, None)
            attrs = {k: v for k, v in attrs.items() if v is not None}
            body = _sacct_row(job_id, attrs.get("name") or ("batch" if step == "batch" else ""),
                              attrs.get("partition") or "", job.get("account") or "", cpus,
                              state, status)
            yield Observation(
                source=self._source, kind="scheduler_event", observed_at=at,
                time_source="line", time_quality=TIME_QUALITY_SECONDS, host=host,
                cluster=self.cluster, workload_id=workload or job_id, format="slurm_sacct",
                body=body, attributes=attrs,
            ).with_id()

    def _node_transitions(self, nodes: dict[str, dict[str, str]], seen_state: dict[str, Any],
                          now_s: int) -> Iterable[Observation]:
        for name, f in sorted(nodes.items()):
            raw = f.get("State", "UNKNOWN")
            reason_full = f.get("Reason") or ""
            m = re.match(r"^(.*?)\s*\[([^@\]]*)@(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\]$", reason_full)
            reason, r_user, r_at = (m[1], m[2], _local_iso_to_ns(m[3])) if m else (reason_full or None, None, None)
            display = _node_display_state(raw)
            serving = _in_service(raw)
            prev = seen_state.get(name)
            # IDLE <-> ALLOCATED <-> MIXED is a node doing its job, not a transition to report
            seen_state[name] = {"state": display, "reason": reason, "in_service": serving}
            if prev is None:
                if serving:
                    continue
            elif serving and prev.get("in_service", True):
                continue
            elif prev.get("state") == display and prev.get("reason") == reason:
                continue
            lines = [f"update_node: node {name} state set to {display}"]
            if reason:
                lines.append(f"update_node: node {name} reason set to: {reason}")
            attrs = {"node": name, "state": display, "state_raw": raw, "reason": reason,
                     "reason_user": r_user, "reason_at_ns": r_at,
                     "previous_state": prev.get("state") if prev else None}
            attrs = {k: v for k, v in attrs.items() if v is not None}
            at, src, q = ((r_at, "line", TIME_QUALITY_SECONDS) if (r_at and reason)
                          else (now_s * _NS, "transport", TIME_QUALITY_TRANSPORT))
            yield Observation(
                source=self._source, kind="scheduler_event", observed_at=at, time_source=src,
                time_quality=q, host=name, cluster=self.cluster, format="slurmctld",
                body="\n".join(lines), attributes=attrs,
            ).with_id()

# ---- CLI: faultstream connect slurm ---------------------------------------------------------------


@connector(interval=10.0, cursor=".state/cursors/slurm-{cluster}.json", errors=(SlurmError,))
def connect_slurm_cli(
    opts: Shared,
    cluster: Annotated[str, typer.Argument(help="cluster name (Slurm ClusterName; Source.instance of the records)")],
) -> Generator[SlurmConnector, Any, None]:
    """Publish Slurm job/step state transitions and node DOWN/DRAIN changes (sacct --json, scontrol show node) to Kafka, key = host; the cursor is saved only after delivery.

    With --follow it polls every --interval seconds until interrupted (Ctrl-C or SIGTERM); a failed poll or delivery is logged and retried at the next poll with the same record ids. With --once (the default) a Slurm, cursor or Kafka error exits 2 with one line on stderr (the cursor is left as it was)."""
    done = yield SlurmConnector(cluster, cursor=opts.cursor_store(), poll_s=opts.interval_s)
    typer.echo(f"published {done.sent} records of Slurm cluster {cluster} to {opts.topic}", err=True)
