"""Records unwrapped before matching (pure: no I/O).

Collectors and launchers wrap the line an emitter printed: a container runtime's CRI prefix, a
``kubectl logs --prefix`` tag, a ``pdsh``/``clush`` host prefix, a JSON log line holding the
message in a field. :func:`unwrap` returns the record's text with each line's wrapper removed,
so that frame rules anchored at the start of the emitter's line (a ``[rankN]:`` prefix, NCCL's
``host:pid:tid [dev]``, a syslog header) read it as the emitter printed it. The record keeps
its position (file:line, topic/partition/offset): only the text matched changes. A host named
by a ``pdsh`` prefix is evidence like any host in a line, never the record's host.

Wrappers, each from the tool that writes it:

* CRI (containerd, CRI-O: the kubelet's ``/var/log/pods`` files; ``cri-api`` logging format
  ``<RFC3339Nano> <stdout|stderr> <P|F> <message>``);
* ``kubectl logs --prefix``: ``[pod/<name>/<container>] <message>``;
* ``pdsh``/``clush``: ``<host>: <message>`` (a lower-case host name holding a digit, and a message
  starts with what a log line starts with: a bracket, a digit, a letter of a syslog month or
  a known program prefix);
* a JSON object on one line (Docker's json-file ``{"log": ...}``, Fluent Bit's nested
  ``{"log": {"message": ...}}``, structured loggers, journald's JSON export): the first string
  field named ``log``, ``message``, ``msg``, ``MESSAGE``, ``text`` or ``body`` (nested objects
  included), then, on a line of its own, the other fields as ``key=value`` (a shipper's time,
  stream and container labels left out) so a level or an error code beside the message is
  read too.
"""

from __future__ import annotations

import re

import orjson

__all__ = ["MESSAGE_FIELDS", "unwrap", "unwrap_line"]

#: JSON fields that hold a log line's message, in the order they are tried
MESSAGE_FIELDS = ("log", "message", "msg", "MESSAGE", "text", "body")

_CRI = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d) (?:stdout|stderr) [PF] ")
_KUBECTL = re.compile(r"\[pod/[^/\]\s]+/[^\]\s]+\] ")
_PDSH = re.compile(r"(?P<host>[a-z][a-z0-9-]*\d[a-z0-9.-]*): (?=[\[\d<]|(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) "
                   r"|NVRM|kernel|nvidia|mlx5|NCCL|slurm|\w+\[\d+\]:|[A-Z][a-z]+Error|[EWIF]\d{4} )")
_RANK = re.compile(r"rank\d+$")


def unwrap_line(line: str) -> str:
    """One line without its collector wrappers (several may be stacked: a CRI line whose
    message is JSON); the line itself when it has none."""
    for _ in range(3):
        m = _CRI.match(line) or _KUBECTL.match(line)
        if m is not None:
            line = line[m.end():]
            continue
        m = _PDSH.match(line)
        if m is not None and not _RANK.match(m["host"]):
            line = line[m.end():]
            continue
        if line[:1] == "{" and line.rstrip()[-1:] == "}":
            message = _json_message(line)
            if message is not None:
                line = message
                continue
        break
    return line


def _json_message(line: str) -> str | None:
    """A JSON log line's message (the first of :data:`MESSAGE_FIELDS`, looked for in nested
    objects too: Fluent Bit's ``{"log": {"message": ...}}``) and, on a second line, its other
    fields as ``key=value`` (dotted keys for nested ones: ``level=error error=CUDA_ERROR_X``;
    :data:`_METADATA` left out), so a level or an error code held beside the message is read as
    well; None when the line is no JSON object or holds no message."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict):
        return None
    leaves: list[tuple[str, str]] = []
    _leaves(obj, "", leaves, 0)
    message = next((v for k, v in leaves if k.rsplit(".", 1)[-1] in MESSAGE_FIELDS and v.strip()), None)
    if message is None:
        return None
    rest = " ".join(f"{k}={v}" for k, v in leaves
                    if v is not message and "\n" not in v and k.split(".", 1)[0] not in _METADATA)
    return message.rstrip("\n") + ("\n" + rest if rest else "")


#: JSON fields a shipper adds that say nothing of the failure (times, stream, the container's
#: Kubernetes and Docker labels)
_METADATA = frozenset({"stream", "time", "ts", "timestamp", "@timestamp", "date", "kubernetes", "docker",
                       "container_id", "container_name", "source", "tag"})


def _leaves(obj: dict, prefix: str, out: list[tuple[str, str]], depth: int) -> None:
    """(dotted key, text) of every str, int or float leaf of ``obj``, in document order; at
    most 64 leaves and 4 levels deep."""
    for key, value in obj.items():
        if len(out) >= 64:
            return
        name = f"{prefix}{key}"
        if isinstance(value, str):
            out.append((name, value))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append((name, str(value)))
        elif isinstance(value, dict) and depth < 4:
            _leaves(value, name + ".", out, depth + 1)


def unwrap(body: str) -> str:
    """``body`` (one record: lines joined with ``\\n``) with each line unwrapped
    (:func:`unwrap_line`); the same string object when no line has a wrapper."""
    lines = body.split("\n")
    out = [unwrap_line(line) for line in lines]
    return body if out == lines else "\n".join(out)
