"""Code hook of the stack-dump rule (correlators/rules/stackdump.yaml): one ``proc.stack``
event per thread of a dump record (py-spy text and JSON, faulthandler, gdb, the PyTorch
flight recorder), parsed by :mod:`correlators.stackdump`.

The rank is the record's ``[rankN]:`` prefix, else the dump's own ``rank`` field (flight
recorder), else the rank the file name states (``stacks-rank5.txt``, ``nccl_trace_rank_5``).
The watchdog / heartbeat threads every rank has (``infra``) give no event. A record that looks
like a dump but cannot be read gives no event either (the engine then treats it as any other
record: counted, and ``log.unrecognised`` if it is at error severity)."""

from __future__ import annotations

from correlators.rules.code import Draft, hook
from correlators.stackdump import StackDumpError, classify, parse_record, rank_from_path

#: innermost frames an event carries
MAX_FRAMES = 8


@hook("stack_dump")
def stack_dump(draft: Draft, match, obs, rule) -> list[Draft]:
    try:
        threads = parse_record(obs.body or "")
    except StackDumpError:
        return []
    path_rank = rank_from_path(obs.position.file if obs.position is not None else None)
    out: list[Draft] = []
    for t in threads:
        where = classify(t)
        if where.state == "infra":
            continue
        a: dict = {"format": t.format, "state": where.state, "main": t.main, "signature": where.signature}
        if t.thread:
            a["thread"] = t.thread
        if t.thread_name:
            a["thread_name"] = t.thread_name
        if where.frame is not None:
            a["frame"] = where.frame.label()
            a["function"] = where.frame.function
            if where.frame.file:
                a["file"] = where.frame.file
        if where.op:
            a["op"] = where.op
        if t.pid is not None:
            a["pid"] = t.pid
        a["frames"] = [f.label() for f in t.frames[:MAX_FRAMES]]
        a["depth"] = len(t.frames)
        for key, value in t.collective.items():
            if key == "op":
                a.setdefault("op", value)
            elif key == "state":
                a["fr_state"] = value
            else:
                a[key if key != "seq" else "seq_num"] = value
        d = Draft(type=draft.type, attributes=a)
        d.rank = draft.rank if draft.rank is not None else (t.rank if t.rank is not None else path_rank)
        if d.rank is None:
            d.rank = obs.rank
        out.append(d)
    return out
