"""``scontrol listpids`` output -> which Slurm task each process of a host was.

``scontrol listpids [JOBID[.STEPID]] [NodeName]``, run on a compute node, lists the processes
of the job steps its slurmstepd daemons track. Its forms, from the Slurm source
(``src/scontrol/info_job.c``, ``_list_pids_one_step`` / ``scontrol_list_pids``; step names
from ``src/common/log.c``, ``log_build_step_id_str`` with ``STEP_ID_FLAG_NO_JOB |
STEP_ID_FLAG_NO_PREFIX``):

* **Text table, Slurm 20.11 .. 24.05**: the header ``PID      JOBID    STEPID   LOCALID
  GLOBALID`` (``"%-8s %-8s %-8s %-7s %-8s\\n"``) printed first, then per step one row per live
  task (``"%-8d %-8u %-8s %-7d %-8d\\n"``: pid, job id, step id, local task id, global task
  id) and one row per other process of the step's container (``"-"`` for both ids: the
  slurmstepd-spawned helpers, the processes a task forked, the extern step's processes).
  Errors go to stderr (``StepId=144.7 does not exist on node ...``), so a capture with
  ``2>&1`` holds them between the header and the rows. Seen on Slurm 22.05.8::

      PID      JOBID    STEPID   LOCALID GLOBALID
      24397    144      batch    0       0
      24411    144      batch    -       -
      24424    144      0        0       0

* **Text table, Slurm 24.11 .. 25.05** (``_print_listpids_info``): the same columns, but the
  rows are collected first and the header is printed only when no error occurred; every row
  ends with a space after the global id (``"%-8d "`` / ``"%-8s "``).
* **JSON / YAML, Slurm 24.11 ..** (``scontrol --json listpids`` / ``--yaml``, data_parser
  ``OPENAPI_LISTPIDS_INFO_RESP``, ``src/plugins/data_parser/v0.0.42/parsers.c``): a mapping
  with ``pids``: a list of ``{pid, job_id, step_id, local_task_id, global_task_id}``; the task
  ids are ``UINT32_NO_VAL`` values, dumped as ``{"set": bool, "infinite": bool, "number": N}``
  (``set: false`` for a process that is not a task), or in the data parser's complex mode as
  a number or ``null``. ``errors`` / ``warnings`` / ``meta`` are ignored.

STEPID is the step number, ``batch`` (the batch script: its task 0 is the script, not a
training rank), ``extern`` (the processes adopted into the job, e.g. ssh sessions),
``interactive`` (salloc's interactive step) or ``TDB`` (a pending step; Slurm spells it so),
with ``+N`` for a heterogeneous step's component (``0+1``). Only tasks that have not exited
are listed: a process killed before the table was taken is not in it, so a collection must be
a snapshot taken while the job ran (several snapshots, one after the other, with a header
each, are read as one table).

GLOBALID is the task's ``SLURM_PROCID``: the training rank when srun starts one task per rank;
with a launcher per node (``srun torchrun ...``) it is the node's index and the workers are the
launcher's children, listed with ``-`` ids.

:func:`parse_listpids` reads every form (pure: text in, rows out). :func:`slurm_job_of` says
which job (and step) a workload id names; :func:`task_pid_rows` keeps the rows of one job's
rank-bearing steps.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import yaml

from schemas.yamlspec import load_yaml

__all__ = ["HEADER", "NAMED_STEPS", "ListpidsError", "ListpidsRow", "ListpidsTable", "parse_listpids",
           "slurm_job_of", "task_pid_rows"]

#: The header ``scontrol listpids`` prints (any run of spaces between the column names).
HEADER = re.compile(r"^\s*PID\s+JOBID\s+STEPID\s+LOCALID\s+GLOBALID\s*$")
#: Step names of ``log_build_step_id_str`` (``TDB``: a pending step, as Slurm spells it).
NAMED_STEPS = ("batch", "extern", "interactive", "TDB")
_STEP = re.compile(r"^(?:\d{1,10}|batch|extern|interactive|TDB)(?:\+\d{1,10})?$")
_INT = re.compile(r"^\d{1,10}$")
#: Slurm's ``NO_VAL`` (``0xfffffffe``) and ``INFINITE`` (``0xffffffff``) as 32-bit task ids.
_NO_VAL = (0xFFFFFFFE, 0xFFFFFFFF)
_UINT32_MAX = 0xFFFFFFFF
#: A workload id that names a Slurm job: ``1001``, ``job-1001``, ``job_1001``, ``1001.0``.
_JOB_ID = re.compile(r"^(?:job[-_]?)?(\d{1,10})(?:\.(\d{1,10}))?$")


class ListpidsError(ValueError):
    """Text that is not ``scontrol listpids`` output: no ``PID JOBID STEPID LOCALID GLOBALID``
    header and no JSON/YAML mapping with a ``pids`` list. The message says which."""


@dataclass(frozen=True)
class ListpidsRow:
    """One process of a job step on the host the table was taken on.

    ``pid``: the process id (> 0); ``job_id``: the numeric Slurm job id as listpids prints it
    (an array task's own job id, a heterogeneous component's own job id); ``step_id``: the
    step as printed (``"0"``, ``"batch"``, ``"extern"``, ``"0+1"``); ``local_id`` /
    ``global_id``: the task's local id on the node and its global id (``SLURM_LOCALID`` /
    ``SLURM_PROCID``), both None for a process that is not a task; ``line``: the 1-based line
    (text) or the 1-based entry of ``pids`` (JSON/YAML)."""

    pid: int
    job_id: int
    step_id: str
    local_id: int | None
    global_id: int | None
    line: int

    @property
    def numbered_step(self) -> bool:
        """True for a step started by srun (``0``, ``3+1``), False for ``batch``, ``extern``,
        ``interactive`` and ``TDB``."""
        return self.step_id.split("+", 1)[0].isdigit()


@dataclass
class ListpidsTable:
    """What :func:`parse_listpids` read: ``rows`` in input order; ``format`` ``"text"``,
    ``"json"`` or ``"yaml"``; ``headers`` how many header lines (text; 1 for JSON/YAML);
    ``malformed`` rows skipped (a line or entry that is not a row: too few/many columns, a
    non-numeric pid or id, an unknown step name, one task id given and the other not, an
    stderr line captured with the table); ``before_header`` non-blank lines before the first
    header (skipped, not counted as malformed: stderr of a 24.11+ run, a shell prompt);
    ``notes``: what else was seen (the JSON ``errors``)."""

    rows: list[ListpidsRow] = field(default_factory=list)
    format: str = "text"
    headers: int = 0
    malformed: int = 0
    before_header: int = 0
    notes: list[str] = field(default_factory=list)


def parse_listpids(text: str) -> ListpidsTable:
    """Read ``scontrol listpids`` output (any form of the module docstring) into rows.

    Malformed rows are skipped and counted (``malformed``), never raised. Raises
    :class:`ListpidsError` when ``text`` holds no header line and is no JSON/YAML mapping with
    a ``pids`` list (an empty text included: 24.11+ prints nothing on stdout when the node
    has no step)."""
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if HEADER.match(line)), None)
    if first is None:
        return _structured(text)
    table = ListpidsTable(format="text")
    table.before_header = sum(1 for line in lines[:first] if line.strip())
    for i in range(first, len(lines)):
        line = lines[i]
        if HEADER.match(line):
            table.headers += 1
            continue
        if not line.strip():
            continue
        row = _text_row(line.split(), i + 1)
        if row is None:
            table.malformed += 1
        else:
            table.rows.append(row)
    return table


def _text_row(cols: list[str], line: int) -> ListpidsRow | None:
    if len(cols) != 5:
        return None
    pid, job, step, local, glob = cols
    if not (_INT.match(pid) and _INT.match(job) and _STEP.match(step)):
        return None
    ids = []
    for value in (local, glob):
        if value == "-":
            ids.append(None)
        elif _INT.match(value) and int(value) <= _UINT32_MAX:
            ids.append(int(value))
        else:
            return None
    return _row(int(pid), int(job), step, ids[0], ids[1], line)


def _row(pid: int, job: int, step: str, local: int | None, glob: int | None, line: int) -> ListpidsRow | None:
    """A row when the values are ones Slurm prints: pid and job id positive 32-bit numbers,
    both task ids given or both not."""
    if not (0 < pid <= _UINT32_MAX and 0 < job <= _UINT32_MAX):
        return None
    if (local is None) != (glob is None):
        return None
    return ListpidsRow(pid=pid, job_id=job, step_id=step, local_id=local, global_id=glob, line=line)


def _structured(text: str) -> ListpidsTable:
    """The JSON / YAML form (``--json`` / ``--yaml``, Slurm 24.11+)."""
    stripped = text.lstrip("\ufeff \t\r\n")
    if not stripped:
        raise ListpidsError("empty: no 'PID JOBID STEPID LOCALID GLOBALID' header "
                            "(scontrol listpids prints nothing when the node has no step)")
    fmt = "json" if stripped.startswith("{") else "yaml"
    try:
        data = json.loads(stripped) if fmt == "json" else load_yaml(stripped)
    except (ValueError, yaml.YAMLError):
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("pids"), list):
        raise ListpidsError("not scontrol listpids output: no 'PID JOBID STEPID LOCALID GLOBALID' "
                            "header and no JSON/YAML mapping with a 'pids' list")
    table = ListpidsTable(format=fmt, headers=1)
    errors = data.get("errors")
    if isinstance(errors, list) and errors:
        table.notes.append(f"{len(errors)} error(s) reported by scontrol: "
                           + "; ".join(str(e.get("description", e) if isinstance(e, dict) else e)[:200]
                                       for e in errors[:3]))
    for n, entry in enumerate(data["pids"], start=1):
        row = _entry_row(entry, n)
        if row is None:
            table.malformed += 1
        else:
            table.rows.append(row)
    return table


def _entry_row(entry: Any, n: int) -> ListpidsRow | None:
    if not isinstance(entry, dict):
        return None
    pid, job, step = entry.get("pid"), entry.get("job_id"), entry.get("step_id")
    if not (_plain_int(pid) and _plain_int(job) and isinstance(step, str) and _STEP.match(step)):
        return None
    ids = []
    for key in ("local_task_id", "global_task_id"):
        ok, value = _task_id(entry.get(key))
        if not ok:
            return None
        ids.append(value)
    return _row(pid, job, step, ids[0], ids[1], n)


def _task_id(value: Any) -> tuple[bool, int | None]:
    """(readable, id or None) of a ``UINT32_NO_VAL`` dump: ``{"set", "infinite", "number"}``,
    a number, ``null``; NO_VAL / INFINITE / ``set: false`` / ``infinite: true`` -> None."""
    if value is None:
        return True, None
    if _plain_int(value):
        return True, None if value in _NO_VAL else value
    if isinstance(value, dict):
        if value.get("infinite") is True or value.get("set") is False:
            return True, None
        number = value.get("number")
        if value.get("set") is True and _plain_int(number):
            return True, None if number in _NO_VAL else number
    return False, None


def _plain_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _UINT32_MAX


def slurm_job_of(workload_id: str) -> tuple[int, str | None] | None:
    """(job id, step or None) a workload id names: ``1001`` and ``job-1001`` / ``job_1001``
    name job 1001, ``1001.2`` its step 2. None for anything else: an array task ``1001_7``
    (listpids prints the task's own job id, which the id does not hold), a heterogeneous
    component ``1001+1``, a Kubernetes name."""
    m = _JOB_ID.match(workload_id.strip())
    if m is None or int(m[1]) == 0:
        return None
    return int(m[1]), m[2]


def task_pid_rows(rows: Iterable[ListpidsRow], job_id: int, step: str | None = None) -> tuple[list[ListpidsRow], dict[str, int]]:
    """The rows that state a task's global id for job ``job_id``: tasks (both ids given) of a
    numbered step (``step`` given: of that step only, heterogeneous components included).
    Returns (rows kept, in input order; counts of the rows left out by reason: ``other_job``,
    ``other_step``, ``not_a_task`` (``-`` ids), ``named_step`` (``batch``, ``extern``,
    ``interactive``, ``TDB``: their task 0 is the script or the container, not a rank))."""
    kept: list[ListpidsRow] = []
    skipped = {"other_job": 0, "other_step": 0, "not_a_task": 0, "named_step": 0}
    for row in rows:
        if row.job_id != job_id:
            skipped["other_job"] += 1
        elif step is not None and row.step_id.split("+", 1)[0] != step:
            skipped["other_step"] += 1
        elif not row.numbered_step:
            skipped["named_step"] += 1
        elif row.global_id is None:
            skipped["not_a_task"] += 1
        else:
            kept.append(row)
    return kept, skipped
