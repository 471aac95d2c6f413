"""The Slurm command-line client: ``sacct``, ``scontrol`` and ``squeue`` run with argument
lists (never a shell) and a timeout, and the parsers of their output (Slurm 22.05).

:class:`SlurmClient` is used by the Slurm connector (``connectors/slurm.py``: job and node
state transitions) and by the Slurm remediation executor (``sinks/executors/slurm.py``: drain,
reboot, resume and the read-back of a node's state).

* :meth:`SlurmClient.run` runs one command and returns a :class:`SlurmRun` (exit status,
  stdout, stderr) whatever the exit status; it raises :class:`SlurmCommandError` when the
  command cannot be started (not found, not executable) and :class:`SlurmTimeout` when it does
  not finish within ``timeout_s`` seconds (the process is killed).
* :meth:`SlurmClient.output` is :meth:`~SlurmClient.run` for a command that must succeed: it
  returns stdout and raises :class:`SlurmError` for a non-zero exit, with the end of stderr.
* :meth:`SlurmClient.sacct_jobs` -- ``sacct --json --allusers -S <start> -E <end>`` (22.05:
  ``{"meta", "errors", "jobs"}``) plus the text ``JobID,ExitCode`` query over the same window;
  :meth:`SlurmClient.nodes` -- ``scontrol -o show node [<node>]`` through
  :func:`parse_scontrol_nodes`.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from typing import Any

__all__ = [
    "NOTHING_FOUND",
    "SlurmClient",
    "SlurmCommandError",
    "SlurmError",
    "SlurmRun",
    "SlurmTimeout",
    "parse_exit_codes",
    "parse_sacct_json",
    "parse_scontrol_nodes",
]

#: sacct --json's error number for a query that matched no job (Slurm 22.05 slurmdb_jobs_get).
NOTHING_FOUND = 9003


class SlurmError(RuntimeError):
    """A Slurm command failed (not found, non-zero exit, timeout) or printed output that is not
    the documented format. The message has the command and the end of its stderr."""


class SlurmCommandError(SlurmError):
    """The command could not be started. ``argv``: the argument list; ``reason``: ``not found``,
    ``not executable`` or the OS error; ``strerror``: the OS's text (``No such file or
    directory``)."""

    def __init__(self, argv: list[str], reason: str, strerror: str) -> None:
        self.argv = list(argv)
        self.reason = reason
        self.strerror = strerror
        super().__init__(f"{argv[0]}: command {reason} ({strerror})")


class SlurmTimeout(SlurmError):
    """The command did not finish within ``timeout_s`` seconds (it was killed)."""

    def __init__(self, argv: list[str], timeout_s: float) -> None:
        self.argv = list(argv)
        self.timeout_s = timeout_s
        super().__init__(f"{' '.join(argv)}: no answer in {timeout_s:g} s")


@dataclass(frozen=True)
class SlurmRun:
    """One finished Slurm command: ``argv``, ``returncode``, ``stdout``, ``stderr`` (text)."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str

    @property
    def message(self) -> str:
        """stderr (else stdout) on one line (newlines -> ``; ``), or ``exit status <n>``."""
        text = (self.stderr.strip() or self.stdout.strip()).replace("\n", "; ")
        return text or f"exit status {self.returncode}"


class SlurmClient:
    """Runs Slurm's command-line tools.

    ``sacct``, ``scontrol``, ``squeue``: the binaries (names on ``PATH`` or paths).
    ``timeout_s``: the limit of one command, seconds."""

    def __init__(self, *, sacct: str = "sacct", scontrol: str = "scontrol", squeue: str = "squeue",
                 timeout_s: float = 60.0) -> None:
        self.sacct = sacct
        self.scontrol = scontrol
        self.squeue = squeue
        self.timeout_s = timeout_s

    def run(self, argv: list[str]) -> SlurmRun:
        """Run ``argv`` (an argument list, no shell) with :attr:`timeout_s`. Returns the
        :class:`SlurmRun` whatever the exit status. Raises :class:`SlurmCommandError` when
        ``argv[0]`` cannot be started, :class:`SlurmTimeout` when it runs too long."""
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout_s, check=False)
        except FileNotFoundError as exc:
            raise SlurmCommandError(argv, "not found", exc.strerror or str(exc)) from exc
        except PermissionError as exc:
            raise SlurmCommandError(argv, "not executable", exc.strerror or str(exc)) from exc
        except OSError as exc:
            raise SlurmCommandError(argv, "cannot be run", exc.strerror or str(exc)) from exc
        except subprocess.TimeoutExpired as exc:
            raise SlurmTimeout(argv, self.timeout_s) from exc
        return SlurmRun(list(argv), proc.returncode, proc.stdout or "", proc.stderr or "")

    def output(self, argv: list[str]) -> str:
        """stdout of ``argv``, which must exit 0. Raises :class:`SlurmError` (exit status and
        the last 500 characters of stderr), and what :meth:`run` raises."""
        run = self.run(argv)
        if run.returncode != 0:
            raise SlurmError(f"{' '.join(argv)}: exit {run.returncode}: {run.stderr.strip()[-500:]}")
        return run.stdout

    def sacct_jobs(self, start: str, end: str) -> tuple[list[dict[str, Any]], dict[str, str]]:
        """The jobs of ``[start, end]`` (local ``YYYY-MM-DDTHH:MM:SS``, as sacct reads times):
        (``jobs`` of ``sacct --json``, ``{JobID: "code:signal"}`` of the text query). Raises
        :class:`SlurmError`."""
        jobs = parse_sacct_json(self.output([self.sacct, "--json", "--allusers", "-S", start, "-E", end]))
        codes = parse_exit_codes(self.output([self.sacct, "-P", "-n", "--allusers", "-S", start, "-E", end,
                                              "-o", "JobID,ExitCode"]))
        return jobs, codes

    def nodes(self, node: str | None = None) -> dict[str, dict[str, str]]:
        """``scontrol -o show node [<node>]`` -> :func:`parse_scontrol_nodes`. Raises
        :class:`SlurmError`."""
        argv = [self.scontrol, "-o", "show", "node"] + ([node] if node is not None else [])
        return parse_scontrol_nodes(self.output(argv))


def parse_sacct_json(text: str) -> list[dict[str, Any]]:
    """The ``jobs`` of a ``sacct --json`` document (22.05: ``{"meta", "errors", "jobs"}``).
    An error "Nothing found" (:data:`NOTHING_FOUND`) is an empty window, not a failure. Raises
    :class:`SlurmError` for another document or a reported error."""
    try:
        doc = json.loads(text)
        jobs = doc["jobs"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise SlurmError(f"sacct --json: not the 22.05 JSON document ({exc}): {text[:200]!r}") from exc
    for err in doc.get("errors") or []:
        if isinstance(err, dict) and err.get("error_number") == NOTHING_FOUND:
            continue
        raise SlurmError(f"sacct --json reported an error: {err}")
    return jobs


def parse_exit_codes(text: str) -> dict[str, str]:
    """``sacct -P -n -o JobID,ExitCode`` (``1001|3:0`` per line) -> ``{"1001": "3:0"}``."""
    codes: dict[str, str] = {}
    for line in text.splitlines():
        jid, sep, code = line.partition("|")
        if sep:
            codes[jid.strip()] = code.strip()
    return codes


def parse_scontrol_nodes(text: str) -> dict[str, dict[str, str]]:
    """Parse ``scontrol -o show node`` (Slurm 22.05: one line per node of space-separated
    ``Key=Value`` pairs, values may hold spaces -- ``OS=Linux 6.1 #1 SMP`` -- and ``Reason=``,
    when present, runs to the end of the line). Returns ``{node name: {key: value}}``.
    Raises :class:`SlurmError` for a non-empty line without ``NodeName=``."""
    nodes: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("No nodes"):
            continue
        reason = None
        cut = line.find(" Reason=")
        if cut >= 0:
            reason = line[cut + len(" Reason="):]
            line = line[:cut]
        fields: dict[str, str] = {}
        for part in re.split(r" (?=[A-Za-z_][A-Za-z0-9_]*=)", line):
            key, sep, value = part.partition("=")
            if sep:
                fields[key] = value.strip()
        if reason is not None:
            fields["Reason"] = reason.strip()
        if "NodeName" not in fields:
            raise SlurmError(f"scontrol -o show node: line without NodeName: {line[:200]!r}")
        nodes[fields["NodeName"]] = fields
    return nodes
