"""NVCRE-style bisection: find the bad hosts behind an ambiguous collective failure.

When every rank of a job reports NCCL timeouts and no host shows hardware evidence, the verdict
is ``ambiguous``/``insufficient`` and the only safe remediation is to re-certify. Testing every
pair of 232 hosts is ~27,000 NCCL runs (232*231/2 = 26,796); NVCRE's procedure needs about 55
(shared/reference/README.md, "NVCRE bisection"):

1. **screen** -- test each topology domain in parallel (one multi-node NCCL test per domain:
   listed domains such as racks/NVLink domains, then leaf switches, then unplaced hosts in
   chunks of ``max_group``). A single-host group is padded with one known-healthy host.
2. **halve** -- split each failing group in two halves (in host order) and test them, each
   padded with known-healthy hosts up to the size of the larger half, so both halves run at the
   same scale. When the first half passes, the second is known to fail (the parent failed) and
   is split without a test of its own -- classic adaptive binary splitting, about
   ``log2(group)`` tests per bad host.
3. **pair** -- a single host is tested paired with a known-healthy host; a failure confirms it
   as a suspect.

Known-healthy hosts are the caller's ``healthy`` list plus every host of a group that passed.
Not modelled here: NVCRE's re-screen with NVLink disabled (a second test name per failing
group) -- the policy can name that test. A fault that needs two hosts together (one bad link
between them) fails the screen but no single host's pair test: it yields no suspect, and the step
list shows the failing screen for a person.

:func:`plan_screen` gives the first, non-adaptive stage (what the engine proposes as a
``recertify`` action's ``plan``); :func:`bisect` runs the whole procedure against a test
callable (a simulator in tests; an executor could drive real runs the same way).
"""

from __future__ import annotations

from typing import Callable, Iterable, NamedTuple, Sequence

from correlators.remediation.guards import FailureDomains
from schemas.bundle import TopologySpec
from schemas.records import CertificationGroup

DEFAULT_TEST = "nccl-allreduce"
MAX_GROUP = 32


def screen_groups(
    hosts: Iterable[str], topology: TopologySpec | FailureDomains | None, *, max_group: int = MAX_GROUP
) -> list[tuple[str, list[str]]]:
    """Partition ``hosts`` into screening groups: ``[(domain name, sorted hosts)]``.

    Each host goes to the first domain containing it (topology ``domains`` in file order, then
    leaf switches); hosts in no domain form ``unplaced``. Groups larger than ``max_group`` are
    cut into chunks named ``<domain>#<n>``."""
    domains = topology if isinstance(topology, FailureDomains) else FailureDomains(topology)
    left = sorted(set(hosts))
    groups: list[tuple[str, list[str]]] = []
    taken: set[str] = set()
    for name, members in domains.domains().items():
        mine = [h for h in left if h in set(members) and h not in taken]
        if mine:
            groups.append((name, mine))
            taken.update(mine)
    rest = [h for h in left if h not in taken]
    if rest:
        groups.append(("unplaced", rest))
    out = []
    for name, members in groups:
        if len(members) <= max_group:
            out.append((name, members))
        else:
            for i in range(0, len(members), max_group):
                out.append((f"{name}#{i // max_group + 1}", members[i : i + max_group]))
    return out


def plan_screen(
    hosts: Iterable[str],
    topology: TopologySpec | FailureDomains | None,
    healthy: Iterable[str] = (),
    *,
    test: str = DEFAULT_TEST,
    max_group: int = MAX_GROUP,
) -> list[CertificationGroup]:
    """The screening stage as :class:`CertificationGroup` steps (stage ``screen``, steps
    1..n, all runnable in parallel). ``healthy``: known-good hosts (not among ``hosts``) used to
    pad single-host groups into pairs."""
    targets = sorted(set(hosts))
    spare = [h for h in dict.fromkeys(healthy) if h not in set(targets)]
    plan = []
    for step, (name, members) in enumerate(screen_groups(targets, topology, max_group=max_group), start=1):
        group = list(members)
        reason = f"screen {name}: {len(members)} host(s)"
        if len(group) == 1 and spare:
            group.append(spare[0])
            reason += f", paired with known-healthy {spare[0]}"
        plan.append(CertificationGroup(step=step, stage="screen", hosts=group, test=test, reason=reason))
    return plan


class Bisection(NamedTuple):
    """Result of :func:`bisect`: confirmed ``suspects`` (sorted), the number of tests run, and
    every step with its outcome (``(group, passed)``, in order)."""

    suspects: list[str]
    tests_run: int
    steps: list[tuple[CertificationGroup, bool]]


def bisect(
    hosts: Sequence[str],
    topology: TopologySpec | FailureDomains | None,
    healthy: Iterable[str],
    test: Callable[[list[str]], bool],
    *,
    test_name: str = DEFAULT_TEST,
    max_group: int = MAX_GROUP,
) -> Bisection:
    """Run screen -> halve -> pair against ``test(hosts) -> passed`` and return the suspects.

    Pure and deterministic given ``test``: the groups depend only on host order, the topology
    and the healthy pool."""
    targets = sorted(set(hosts))
    good: list[str] = [h for h in dict.fromkeys(healthy) if h not in set(targets)]
    steps: list[tuple[CertificationGroup, bool]] = []
    suspects: list[str] = []

    def run(stage: str, group: list[str], pad_to: int, reason: str) -> bool:
        padding = [h for h in good if h not in group][: max(0, pad_to - len(group))]
        if padding:
            reason += f"; padded with known-healthy {', '.join(padding)}"
        elif len(group) < pad_to:
            reason += "; no known-healthy host to pad with"
        tested = group + padding
        passed = test(list(tested))
        steps.append(
            (CertificationGroup(step=len(steps) + 1, stage=stage, hosts=tested, test=test_name, reason=reason), passed)
        )
        if passed:
            good.extend(h for h in group if h not in good)
        return passed

    def isolate(group: list[str], tested: bool) -> None:
        """``group`` is known to fail: ``tested`` by its own (padded) test, else inferred
        because its parent failed and its sibling passed."""
        if len(group) == 1:
            # a single host that failed its own test (padded with a healthy host) is confirmed;
            # an inferred one is confirmed by a pair test
            if tested or not run("pair", group, 2, f"confirm suspect {group[0]}"):
                suspects.append(group[0])
            return
        mid = (len(group) + 1) // 2
        first, second = group[:mid], group[mid:]
        if not _probe(first, len(first)):
            isolate(first, True)
            if not _probe(second, len(first)):
                isolate(second, True)
        else:
            isolate(second, False)

    def _probe(half: list[str], size: int) -> bool:
        if len(half) == 1:
            return run("pair", half, 2, f"confirm suspect {half[0]}")
        return run("halve", half, size, f"half of a failing group: {len(half)} host(s)")

    failing = []
    for name, members in screen_groups(targets, topology, max_group=max_group):
        if not run("screen", list(members), 2 if len(members) == 1 else 0, f"screen {name}: {len(members)} host(s)"):
            failing.append(members)
    for members in failing:
        isolate(list(members), True)
    return Bisection(sorted(set(suspects)), len(steps), steps)
