"""The ``topology`` connector: a cluster's fabric topology from files, published as ONE record.

:class:`TopologyConnector` reads any number of ``topology.yaml``, ``ibnetdiscover``,
``lldpctl -f json`` and hosts files with the parsers of :mod:`connectors.topology_parsers`,
merges them (:func:`~connectors.topology_parsers.merge_topology`) and, as a
:class:`connectors.source.Source` keyed by cluster, gives the one record that
``faultstream connect topology`` (:func:`connect_topology_cli`) publishes on the compacted
``topology`` topic (key = cluster) through :func:`connectors.runner.run`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Generator, Annotated, Any, Callable, Iterable, Iterator, Mapping

import typer
import yaml

from connectors.command import Shared, connector
from connectors.topology_parsers import (
    ParseReport,
    TopologyError,
    hosts_topology,
    merge_topology,
    parse_hosts_map,
    parse_node_name_map,
    parse_topology_yaml,
    read_ibnetdiscover,
    read_lldpctl_json,
    topology_observation,
)
from schemas.bundle import TopologySpec
from schemas.records import CoverageEntry, Observation

__all__ = ["TopologyConnector", "connect_topology_cli"]


# -- the connector ------------------------------------------------------------------------------


def _read_text(path: str | Path) -> str:
    try:
        return Path(path).read_text("utf-8", errors="replace")
    except OSError as exc:
        raise TopologyError(f"cannot read: {exc.strerror or exc}", source=str(path)) from None


class TopologyConnector:
    """The topology of one cluster from files, published as one record.

    ``cluster``: the cluster name (record key, ``Source.instance``, ``Observation.cluster``).
    Sources (any number of each, paths): ``topology_yaml`` (BUNDLE.md ``topology.yaml``),
    ``ibnetdiscover`` (its output), ``lldp`` (``(host, path)`` pairs or a host -> path mapping
    of ``lldpctl -f json`` outputs), ``hosts`` (``/etc/hosts`` or ``host,ip`` CSV files);
    ``host_names`` is passed to :func:`parse_ibnetdiscover`. ``clock`` gives the record time
    (UTC ns; default ``time.time_ns``).

    :meth:`read` parses and merges everything (``spec`` then holds the result, ``reports``
    ``(path, ParseReport)`` for every file); :meth:`observations` yields the one record. As a
    :class:`connectors.source.Source` (:meth:`poll`, :meth:`checkpoint`, :meth:`coverage`,
    :meth:`key` = the cluster) it is published by :func:`connectors.runner.run`. Errors are
    :class:`TopologyError` naming the file (``source``) and line."""

    def __init__(
        self,
        cluster: str,
        *,
        ibnetdiscover: Iterable[str | Path] = (),
        lldp: Mapping[str, str | Path] | Iterable[tuple[str, str | Path]] = (),
        hosts: Iterable[str | Path] = (),
        topology_yaml: Iterable[str | Path] = (),
        host_names: Mapping[str, str] | None = None,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        if not cluster:
            raise ValueError("cluster must not be empty")
        self.cluster = cluster
        self.ibnetdiscover = [Path(p) for p in ibnetdiscover]
        pairs = lldp.items() if isinstance(lldp, Mapping) else lldp
        self.lldp = [(h, Path(p)) for h, p in pairs]
        self.hosts = [Path(p) for p in hosts]
        self.topology_yaml = [Path(p) for p in topology_yaml]
        self.host_names = dict(host_names or {})
        self.clock = clock
        self.reports: list[tuple[str, ParseReport]] = []
        self.spec: TopologySpec | None = None
        self._polled = False

    def _parse(self, path: Path, parse: Callable[[str], ParseReport]) -> TopologySpec:
        try:
            report = parse(_read_text(path))
        except TopologyError as exc:
            raise exc.in_source(str(path)) from None
        self.reports.append((str(path), report))
        return report.spec

    def read(self) -> TopologySpec:
        """Parse every source and merge them (:func:`merge_topology`). Raises
        :class:`TopologyError` (naming the file) for unreadable or malformed input and for
        conflicts between sources."""
        self.reports = []
        specs = [self._parse(p, lambda t: ParseReport(parse_topology_yaml(t), len(t.splitlines())))
                 for p in self.topology_yaml]
        specs += [self._parse(p, lambda t: read_ibnetdiscover(t, host_names=self.host_names))
                  for p in self.ibnetdiscover]
        specs += [self._parse(p, lambda t, h=h: read_lldpctl_json(t, h)) for h, p in self.lldp]
        specs += [self._parse(p, lambda t: ParseReport(hosts_topology(parse_hosts_map(t)), len(t.splitlines())))
                  for p in self.hosts]
        self.spec = merge_topology(*specs)
        return self.spec

    def observation(self, spec: TopologySpec | None = None) -> Observation:
        """The cluster's topology record for ``spec`` (default: :meth:`read`), timed now by
        ``clock``."""
        return topology_observation(spec if spec is not None else self.read(), self.cluster, self.clock())

    def observations(self) -> Iterator[Observation]:
        """Yields the one record of :meth:`observation`."""
        yield self.observation()

    # -- the Source contract --------------------------------------------------------------------

    def poll(self) -> list[Observation]:
        """The cluster's record on the first call (of :attr:`spec` when :meth:`read` ran,
        else read now), ``[]`` afterwards. Raises :class:`TopologyError`."""
        if self._polled:
            return []
        obs = self.observation(self.spec)
        self._polled = True
        return [obs]

    def key(self, record: Observation) -> str:
        """The Kafka key of the record: the cluster name (the topic is compacted by cluster)."""
        return self.cluster

    def checkpoint(self) -> dict[str, Any]:
        """``{}``: the record is the whole topology, there is no position to keep."""
        return {}

    def coverage(self) -> list[CoverageEntry]:
        """One entry ``topology:<path>`` per file parsed by the last :meth:`read`: lines read,
        unrecognised lines skipped (``unparsed``) and the parser's notes."""
        return [CoverageEntry(source=f"topology:{path}", status="present" if report.lines else "empty",
                              records=report.lines, unparsed=len(report.skipped),
                              detail="; ".join(report.notes[:5]))
                for path, report in self.reports]


# -- CLI ----------------------------------------------------------------------------------------


def _summary(spec: TopologySpec) -> str:
    return (f"{len(spec.links)} links, {len(spec.uplinks)} uplinks, {len(spec.hosts)} hosts, "
            f"{len(spec.domains)} domains")


@connector(interval=None, topic="topology", errors=(TopologyError,))
def connect_topology_cli(
    opts: Shared,
    cluster: Annotated[str, typer.Option("--cluster", help="cluster name: the record's key and source instance")],
    ibnetdiscover: Annotated[list[Path] | None, typer.Option(
        "--ibnetdiscover", metavar="FILE", dir_okay=False,
        help="ibnetdiscover output (repeatable)")] = None,
    lldp: Annotated[list[str] | None, typer.Option(
        "--lldp", metavar="HOST=FILE", help="a host's 'lldpctl -f json' output (repeatable)")] = None,
    hosts: Annotated[list[Path] | None, typer.Option(
        "--hosts", metavar="FILE", dir_okay=False,
        help="/etc/hosts-style file or host,ip CSV: the hosts' addresses (repeatable)")] = None,
    topology_yaml: Annotated[list[Path] | None, typer.Option(
        "--topology-yaml", metavar="FILE", dir_okay=False,
        help="a BUNDLE.md topology.yaml (repeatable)")] = None,
    node_name_map: Annotated[Path | None, typer.Option(
        "--node-name-map", metavar="FILE", dir_okay=False,
        help="ibnetdiscover node name map (<guid> \"<name>\") to name hosts and switches")] = None,
    print_only: Annotated[bool, typer.Option("--print", help="print the merged topology as YAML and publish nothing")] = False,
    delete: Annotated[bool, typer.Option("--delete", help="delete the cluster's topology: publish a tombstone for its key (no sources)")] = False,
) -> Generator[TopologyConnector | None, Any, None]:
    """Publish a cluster's fabric topology (ibnetdiscover, lldpctl -f json, hosts files, topology.yaml) as one record, key = cluster, on the compacted topology topic.

    The sources are merged (a cable or address claimed differently by two sources is an error); with --print the merged topology.yaml is printed on stdout instead; with --delete a tombstone for the cluster's key ends its topology (the worker forgets it, compaction removes it). Bad input or a Kafka error exits 2 with one line on stderr."""
    if delete:
        if ibnetdiscover or lldp or hosts or topology_yaml or print_only:
            raise ValueError("--delete takes no sources and no --print")
        if not cluster.strip():
            raise ValueError("--delete needs a non-empty --cluster")
        with opts.producer() as producer:
            producer.send_tombstone(cluster, "Observation")
            producer.flush()
        typer.echo(f"deleted the topology of {cluster}: tombstone published to {opts.topic}", err=True)
        yield None
        return

    pairs: list[tuple[str, str]] = []
    for item in lldp or []:
        host, sep, path = item.partition("=")
        if not sep or not host.strip() or not path.strip():
            raise ValueError(f"--lldp {item!r}: expected HOST=FILE")
        pairs.append((host.strip(), path.strip()))
    if not (ibnetdiscover or pairs or hosts or topology_yaml):
        raise ValueError("give at least one of --ibnetdiscover, --lldp, --hosts, --topology-yaml")
    names = None
    if node_name_map is not None:
        try:
            names = parse_node_name_map(_read_text(node_name_map))
        except TopologyError as exc:
            raise exc.in_source(str(node_name_map)) from None
    conn = TopologyConnector(cluster, ibnetdiscover=ibnetdiscover or [], lldp=pairs, hosts=hosts or [],
                             topology_yaml=topology_yaml or [], host_names=names)
    spec = conn.read()
    for path, report in conn.reports:
        if report.skipped:
            first = report.skipped[0]
            typer.echo(f"{path}: {len(report.skipped)} unrecognised lines skipped "
                       f"(first: line {first[0]}: {first[1][:80]})", err=True)
        for note in report.notes:
            typer.echo(f"{path}: {note}", err=True)
    if print_only:
        typer.echo(yaml.safe_dump(spec.model_dump(mode="json", exclude_none=True), sort_keys=False), nl=False)
        typer.echo(f"topology of {cluster}: {_summary(spec)}", err=True)
        yield None
        return
    if not spec.links and not spec.hosts:
        raise ValueError("the sources give no cables and no host addresses; nothing published "
                         "(an empty record would replace the cluster's topology)")
    yield conn
    typer.echo(f"published the topology of {cluster} ({_summary(spec)}) to {opts.topic}", err=True)
