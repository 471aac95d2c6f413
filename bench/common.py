"""Helpers shared by the benchmarks (run them as scripts from the repository root)."""

from __future__ import annotations

from pathlib import Path


def peak_rss_mib() -> float:
    """Peak RSS of this process in MiB (``VmHWM`` from ``/proc/self/status``). Not
    ``ru_maxrss``: Linux carries the parent's high-water mark into a child across fork + exec,
    so a child of the process that generated a bundle would report the generator's peak
    (checked: a parent holding 1 GiB -> a fresh child's ru_maxrss says 1,037 MiB, its VmHWM
    13 MiB). ``ru_maxrss`` only where there is no /proc."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


#: the small example bundle a bench replays once before its timed replay
WARM_UP_BUNDLE = Path(__file__).resolve().parents[1] / "examples" / "incidents" / "public-rc58-xid79-kubernetes-gpu"


def warm_up() -> float:
    """Replay :data:`WARM_UP_BUNDLE` in this process, as a running service has already done
    before the replay a bench times: the rule pack loaded, its keyword sets compiled
    (Hyperscan), the readers' modules imported. Returns the seconds it took (the one-time
    cost a bench reports beside its figure)."""
    import time

    from streams.replay import replay_bundle

    t0 = time.perf_counter()
    replay_bundle(WARM_UP_BUNDLE)
    return time.perf_counter() - t0
