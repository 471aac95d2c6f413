"""Enrichment of extracted events with the allocation table and per-host GPU facts.

The allocation table says which ranks of which workload ran on which host and GPU (from
``workload.yaml`` in replay, from scheduler events in the stream). Enrichment fills what a log
line leaves out:

* ``workload_id`` of the attempt;
* ``rank`` from a local rank (``local_rank`` attribute, torchrun), from the GPU index (NCCL's
  ``[dev]``), or from the GPU's PCI bus id through the host's GPU table (nvidia-smi
  telemetry: PCI id -> index);
* ``host`` for scheduler-side lines that name a rank but were read from ``_scheduler``;
* the ``host`` of a declared aggregator's event settled against the allocation's nodes
  (:func:`correlators.identity.settle`: a name that is no node of the allocation goes back to
  the host that collected the record);
* ``attributes.peer_host`` when ``peer`` is an address of a known host (``10.0.0.15:38560``).

Enrichment is pure: it returns a new event (re-identified with :meth:`Event.with_id`) or the
same object when nothing changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from correlators.identity import COLLECTED_ON, settle
from correlators.ids import normalise_pci, parse_address
from schemas.bundle import WorkloadSpec
from schemas.records import Event, GpuRef, Observation

__all__ = ["Allocation", "normalise_pci"]  # normalise_pci: correlators.ids's, named here for callers


@dataclass
class Allocation:
    """Host/rank/GPU facts of one workload attempt.

    ``ranks``: rank -> (host, gpu index or None); ``ips``: address -> host (as
    ``workload.yaml`` writes it; read when the table is built);
    ``gpus``: (host, PCI bus id in the :func:`correlators.ids.normalise_pci` form) -> GPU
    index, learned from telemetry;
    ``pids``: (host, pid) -> rank from ``ranks.<N>.pid``; ``task_pids``: the scheduler's step
    records of ``workload.yaml`` ``task_pids`` (``scontrol listpids`` tables of the bundle's
    ``scheduler/<host>/``), one (host, pid, rank, step or None, source) each, in the
    record's order (:mod:`correlators.pids` turns both into pid -> rank statements and adds
    what the logs state); ``nodes``: the allocation's node names (``WorkloadSpec.nodes``; the
    hosts of ``ranks`` count as nodes too), against which an aggregator's in-line host names
    are settled.
    """

    workload_id: str
    cluster: str
    ranks: dict[int, tuple[str, int | None]] = field(default_factory=dict)
    ips: dict[str, str] = field(default_factory=dict)
    gpus: dict[tuple[str, str], int] = field(default_factory=dict)
    pids: dict[tuple[str, int], int] = field(default_factory=dict)
    task_pids: list[tuple[str, int, int, str | None, str]] = field(default_factory=list)
    nodes: tuple[str, ...] = ()

    @classmethod
    def from_workload(cls, spec: WorkloadSpec) -> "Allocation":
        """Build the table from ``workload.yaml``."""
        ranks = spec.rank_layout()
        ips = {facts.ip: host for host, facts in spec.hosts.items() if facts.ip}
        pids = {(slot.host, slot.pid): r for r, slot in spec.ranks.items() if slot.pid}  # only explicit ranks have pids
        tasks = [(t.host, t.pid, t.rank, t.step, t.source) for t in spec.task_pids]
        return cls(workload_id=spec.workload_id, cluster=spec.cluster, ranks=ranks, ips=ips, pids=pids,
                   task_pids=tasks, nodes=tuple(spec.nodes))

    def __post_init__(self) -> None:
        self._by_host_gpu: dict[tuple[str, int], int] = {}
        self._by_host: dict[str, list[int]] = {}
        self._reindex()

    def _reindex(self) -> None:
        self._by_host_gpu = {}
        self._by_host = {}
        self._nodes = tuple(dict.fromkeys([*self.nodes, *(h for h, _ in self.ranks.values() if h)]))
        # addresses normalised (correlators.ids.parse_address), first host per address wins
        self._ip_host: dict[str, str] = {}
        for ip, host in self.ips.items():
            self._ip_host.setdefault(parse_address(ip) or ip, host)
        for rank in sorted(self.ranks):
            host, gpu = self.ranks[rank]
            self._by_host.setdefault(host, []).append(rank)
            if gpu is not None:
                self._by_host_gpu[(host, gpu)] = rank

    def learn_gpu(self, obs: Observation) -> None:
        """Record the PCI id -> index mapping a telemetry observation carries."""
        if obs.gpu and obs.gpu.pci_bus_id and obs.gpu.index is not None:
            pci = normalise_pci(obs.gpu.pci_bus_id)
            if pci:
                self.gpus[(obs.host, pci)] = obs.gpu.index

    def ranks_on(self, host: str) -> list[int]:
        """Ranks placed on ``host``, ascending."""
        return list(self._by_host.get(host, ()))

    def rank_of(self, host: str, gpu_index: int | None) -> int | None:
        """The rank on ``host`` using GPU ``gpu_index``, if the table knows it."""
        if gpu_index is None:
            return None
        return self._by_host_gpu.get((host, gpu_index))

    def gpu_index(self, host: str, gpu: GpuRef | None) -> int | None:
        """GPU index of a GpuRef: its own index, else through the PCI table."""
        if gpu is None:
            return None
        if gpu.index is not None:
            return gpu.index
        pci = normalise_pci(gpu.pci_bus_id)
        return self.gpus.get((host, pci)) if pci else None

    def host_of_peer(self, peer: str | None) -> str | None:
        """The host behind a peer as NCCL/gloo print it: an address (``10.0.0.15:38560``,
        ``10.0.0.15<38560>``, ``[10.0.0.15]:11692``, IPv4-mapped ``::ffff:10.0.0.15``; read
        with :func:`correlators.ids.parse_address`) of a host in ``ips``, or a host name of
        the allocation (``node-a01``, ``node-a01.cluster:5000``). None when neither."""
        if not peer:
            return None
        addr = parse_address(peer)
        if addr is not None and addr in self._ip_host:
            return self._ip_host[addr]
        text = peer.strip().lstrip("[")
        for sep in ("<", "]", ":"):
            text = text.split(sep)[0]
        if text in self.ips:
            return self.ips[text]
        if text in self._by_host:
            return text
        short = text.split(".")[0]
        return short if short in self._by_host else None

    def enrich(self, event: Event) -> Event:
        """Fill workload, rank, host and peer_host; see the module docstring."""
        if COLLECTED_ON in event.attributes:
            event = settle(event, self._nodes)
        update: dict = {}
        attrs = event.attributes
        host = event.host
        if event.rank is not None and event.rank in self.ranks:
            rank_host = self.ranks[event.rank][0]
            if host not in self._by_host and rank_host:
                update["host"] = host = rank_host
        if event.rank is None:
            rank = None
            local = attrs.get("local_rank")
            if isinstance(local, int):
                on_host = self.ranks_on(host)
                rank = self.rank_of(host, local)
                if rank is None and 0 <= local < len(on_host):
                    rank = on_host[local]
            if rank is None:
                rank = self.rank_of(host, self.gpu_index(host, event.gpu))
            if rank is None:
                on_host = self.ranks_on(host)
                global_rank = attrs.get("global_rank")
                if isinstance(global_rank, int) and global_rank in self.ranks:
                    rank = global_rank
                elif len(on_host) == 1 and event.type.startswith(("cuda.", "proc.")):
                    rank = on_host[0]
            if rank is not None:
                update["rank"] = rank
        if event.workload_id != self.workload_id:
            update["workload_id"] = self.workload_id
        if not event.cluster and self.cluster:
            update["cluster"] = self.cluster
        peer_host = self.host_of_peer(event.peer)
        if peer_host and attrs.get("peer_host") != peer_host:
            update["attributes"] = {**attrs, "peer_host": peer_host}
        if not update:
            return event
        return event.model_copy(update=update).with_id()
