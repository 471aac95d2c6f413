"""Lookups over the fabric topology: which cable an event is about, which host an address is.

:class:`FabricIndex` wraps a :class:`schemas.bundle.TopologySpec` (``topology.yaml``, or the
merged output of the ``ibnetdiscover`` / ``lldpctl`` / hosts-file parsers in
``connectors.topology``) and answers the questions the fabric correlator asks:

* :meth:`FabricIndex.link_of` -- the cable an event names. A switch-side line names
  ``<switch>`` + port (the event's host is the switch); a host-side line names the HCA by
  RDMA device (``mlx5_0``), netdev (``enp1s0f0``) or PCI function (``0000:01:00.0``); a counter
  sample already carries ``fabric_port`` (``leaf-01/17`` or ``node-a01/mlx5_0/1``).
* :meth:`FabricIndex.host_of_address` -- ``10.0.0.15:38560``, ``10.0.0.15<38560>`` and
  ``::ffff:10.0.0.15`` (an IPv4-mapped RoCE GID) all name the host that owns 10.0.0.15.
* :meth:`FabricIndex.domains_of` -- the failure domains of a host: the ``domains`` of the
  topology (racks, NVLink domains) plus ``switch:<leaf>`` for every switch it is cabled to.

Port ids: the switch end ``<switch>/<port>`` (:attr:`schemas.bundle.Link.port_id`) is the
canonical key of a cable; the host end is ``<host>/<hca>/<port>``. Without a topology an
event's port key falls back to what the line itself names, so a fabric fault is still found,
only without its other end. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable

from correlators.ids import normalise_bdf, parse_address
from schemas.bundle import Link, TopologySpec
from schemas.records import Event

__all__ = ["FabricIndex", "host_port_id", "parse_address"]  # parse_address: correlators.ids's


def host_port_id(link: Link) -> str:
    """The host end of a cable, ``<host>/<hca>/<port>`` (e.g. ``node-a05/mlx5_0/1``)."""
    return f"{link.host}/{link.hca}/{link.host_port}"


def _name_key(name: str) -> str:
    """The lookup key of a name a line gives an HCA port: a PCI function in the
    :func:`correlators.ids.normalise_bdf` form (``01:00.1`` and ``0000:01:00.1`` are one
    function), any other name (RDMA device, netdev, GUID) lower-cased."""
    return normalise_bdf(name) or name.lower()


class FabricIndex:
    """An index over one cluster's :class:`TopologySpec` (pure, immutable after build).

    ``spec`` may be None (no topology known): every lookup then answers from the event alone.
    ``extra_ips`` adds host -> addresses learned elsewhere (``workload.yaml`` ``hosts.<h>.ip``).
    """

    def __init__(self, spec: TopologySpec | None = None, extra_ips: dict[str, Iterable[str]] | None = None):
        self.spec = spec or TopologySpec()
        self.links: list[Link] = sorted(self.spec.links, key=lambda l: (l.switch, l.switch_port, l.host, l.hca))
        self.by_port: dict[str, Link] = {link.port_id: link for link in self.links}
        self.by_host_port: dict[str, Link] = {host_port_id(link): link for link in self.links}
        self._by_host_name: dict[tuple[str, str], Link] = {}
        self._host_links: dict[str, list[Link]] = {}
        self.switch_links: dict[str, list[Link]] = {}
        for link in self.links:
            self._host_links.setdefault(link.host, []).append(link)
            self.switch_links.setdefault(link.switch, []).append(link)
            for name in (link.hca, link.netdev, link.pci, link.hca_guid):
                if name:
                    self._by_host_name.setdefault((link.host, _name_key(name)), link)
        self.switches: set[str] = set(self.switch_links)
        for a, b in self.spec.uplinks:
            for end in (a, b):
                self.switches.add(end.split("/", 1)[0])
        self._uplink_peer: dict[str, str] = {}
        for a, b in self.spec.uplinks:
            self._uplink_peer[a] = b
            self._uplink_peer[b] = a
        self._ip_host: dict[str, str] = {}
        ips = {h: list(facts.ips) for h, facts in self.spec.hosts.items()}
        for host, addrs in (extra_ips or {}).items():
            ips.setdefault(host, []).extend(addrs)
        for host in sorted(ips):
            for addr in ips[host]:
                norm = parse_address(addr)
                if norm:
                    self._ip_host.setdefault(norm, host)
        self._domains: dict[str, list[str]] = {}
        for name in sorted(self.spec.domains):
            for host in self.spec.domains[name]:
                self._domains.setdefault(host, []).append(name)

    # -- lookups -----------------------------------------------------------------------------

    def host_links(self, host: str) -> list[Link]:
        """The cables of ``host`` (sorted by switch port)."""
        return self._host_links.get(host, [])

    def host_of_address(self, text: str | None) -> str | None:
        """The host owning the address in ``text`` (see :func:`parse_address`), or None."""
        addr = parse_address(text)
        return self._ip_host.get(addr) if addr else None

    def uplink_switches(self, port: str) -> set[str]:
        """The switches at the two ends of the switch-to-switch cable whose end is ``port``
        (``spine-01/Ethernet8`` -> {spine-01, leaf-02}); empty when ``port`` is no uplink end."""
        peer = self._uplink_peer.get(port)
        return {port.split("/", 1)[0], peer.split("/", 1)[0]} if peer else set()

    def is_switch(self, node: str) -> bool:
        """True if ``node`` is a switch of the topology."""
        return node in self.switches

    def domains_of(self, host: str) -> list[str]:
        """Failure domains of ``host``: topology ``domains`` it belongs to, then
        ``switch:<name>`` for each switch it is cabled to (sorted, no duplicates)."""
        out = list(self._domains.get(host, []))
        out += sorted({f"switch:{link.switch}" for link in self.host_links(host)})
        return out

    def domain_hosts(self, domain: str) -> list[str]:
        """Hosts of a domain name as :meth:`domains_of` returns it."""
        if domain.startswith("switch:"):
            return sorted({link.host for link in self.switch_links.get(domain[7:], [])})
        return sorted(self.spec.domains.get(domain, []))

    def link_of(self, event: Event) -> Link | None:
        """The cable ``event`` is about, or None when the topology does not say.

        Order: the event's ``fabric_port`` (switch or host form); a switch-side line (host is
        a switch) by its ``port`` attribute; a host-side line by ``device`` / ``netdev`` /
        ``hca`` attribute (RDMA name, netdev or PCI function); a host with exactly one cable."""
        if event.fabric_port:
            link = self.by_port.get(event.fabric_port) or self.by_host_port.get(event.fabric_port)
            if link is not None:
                return link
        attrs = event.attributes
        port = attrs.get("port")
        if self.is_switch(event.host):
            return self.by_port.get(f"{event.host}/{port}") if port is not None else None
        for key in ("device", "netdev", "hca"):
            value = attrs.get(key)
            if isinstance(value, str):
                # "mlx4_0" port 2 (NCCL's "mlx4_0:2 Got async event") is that port's cable, not
                # the first cable of a dual-port HCA
                link = self.by_host_port.get(f"{event.host}/{value}/{port}") if port is not None else None
                link = link or self._by_host_name.get((event.host, _name_key(value)))
                if link is not None:
                    return link
                # "mlx5_0/1" (device/port) as counter samples name a host port
                link = self.by_host_port.get(f"{event.host}/{value}")
                if link is not None:
                    return link
        links = self.host_links(event.host)
        return links[0] if len(links) == 1 else None

    def port_key(self, event: Event) -> str | None:
        """The canonical port id of the cable ``event`` is about: the switch end
        ``<switch>/<port>`` when the topology knows the cable, else what the line names
        (``fabric_port``; ``<switch>/<port>`` for switch lines; ``<host>/<device>/<port>`` for
        host lines, ``device`` the RDMA device, PCI function or netdev the line names and
        ``port`` its HCA port, 1 when the line names none: an mlx5 PCI function or netdev
        is one port), else None (:class:`schemas.records.Cable`)."""
        link = self.link_of(event)
        if link is not None:
            return link.port_id
        if event.fabric_port:
            return event.fabric_port
        attrs = event.attributes
        port = attrs.get("port")
        # a switch's own line about a port no host is cabled to (an uplink) is still that port
        if (attrs.get("side") == "switch" or self.is_switch(event.host)) and port is not None:
            return f"{event.host}/{port}"
        device = attrs.get("device") or attrs.get("netdev") or attrs.get("hca")
        return f"{event.host}/{device}/{port if port is not None else 1}" if device else None
