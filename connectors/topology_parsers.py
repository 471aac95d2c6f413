"""Fabric topology parsers: what operators already collect -> :class:`schemas.bundle.TopologySpec`.

The engine correlates fabric faults by switch port, so it needs to know which host HCA/NIC port
is cabled to which switch port, and which addresses belong to which host. Everything here
produces a :class:`schemas.bundle.TopologySpec` (the ``topology.yaml`` model of ``BUNDLE.md``);
:func:`merge_topology` combines several of them; :func:`topology_observation` makes the record
of a cluster's merged spec and :func:`topology_from_observation` reads it back. The connector
that publishes it is :mod:`connectors.topology`.

Sources and the formats' origins:

* :func:`parse_ibnetdiscover` -- the topology file printed by ``ibnetdiscover`` (infiniband-diags,
  rdma-core; format as written by ``out_switch``/``out_ca``/``out_switch_port``/``out_ca_port``
  in ``infiniband-diags/ibnetdiscover.c`` and described in ``ibnetdiscover(8)``), the normal
  output without ``-p``/``-l``. ``-g`` (grouping) output is accepted too.
* :func:`parse_lldpctl_json` -- ``lldpctl -f json`` (lldpd 0.9.x-1.0.x, "cleaned" JSON: a
  one-element array is unwrapped and an object with a ``name`` is keyed by it, see lldpd's
  ``src/client/json_writer.c``; so ``interface`` is a dict for one neighbour and a list of
  one-key dicts for several) and ``lldpctl -f json0`` (the same tree without that cleaning:
  every value is a list, names stay in ``name``).
* :func:`parse_hosts_map` -- an ``/etc/hosts`` file (``hosts(5)``: address, canonical name,
  aliases; ``#`` comments) or a two-column ``host,ip`` CSV.
* :func:`parse_topology_yaml` -- a ``topology.yaml`` of ``BUNDLE.md`` v1.
* :func:`parse_node_name_map` -- an ibnetdiscover ``--node-name-map`` file (``<guid> "<name>"``,
  ``ibnetdiscover(8)``), usable as ``host_names``.

GUIDs are written ``0x`` + 16 lower-case hex digits (``0x0c42a10300b1e2f1``) whatever the
source printed (ibnetdiscover prints port GUIDs unpadded and without ``0x``);
:func:`correlators.ids.normalise_guid` does it (also named ``normalize_guid`` here). Errors in
input are :class:`TopologyError` (a ``ValueError``) with the 1-based line number when there
is one.
"""

from __future__ import annotations

import csv
import io
import ipaddress
import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping

import pydantic
import yaml

from correlators.ids import format_guid, normalise_guid, parse_guid
from schemas.bundle import Link, TopologyHost, TopologySpec
from schemas.records import TIME_QUALITY_TRANSPORT, Observation, Source
from schemas.yamlspec import load_yaml

__all__ = [
    "FABRIC_HOST",
    "TopologyError",
    "ParseReport",
    "normalize_guid",
    "read_ibnetdiscover",
    "parse_ibnetdiscover",
    "read_lldpctl_json",
    "parse_lldpctl_json",
    "parse_hosts_map",
    "hosts_topology",
    "parse_topology_yaml",
    "parse_node_name_map",
    "merge_topology",
    "topology_observation",
    "topology_from_observation",
]

#: ``Observation.host`` of topology records: they describe the fabric, not one host.
FABRIC_HOST = "_fabric"


class TopologyError(ValueError):
    """Input that cannot be read as topology. ``message`` says what is wrong, ``line`` is the
    1-based line number in the input (None when the problem is not on one line), ``source``
    the file it came from (set by :class:`TopologyConnector`, None for text)."""

    def __init__(self, message: str, *, line: int | None = None, source: str | None = None) -> None:
        self.message = message
        self.line = line
        self.source = source
        super().__init__(str(self))

    def __str__(self) -> str:
        where = ":".join(str(p) for p in (self.source, self.line) if p is not None)
        if self.source is None and self.line is not None:
            where = f"line {self.line}"
        return f"{where}: {self.message}" if where else self.message

    def in_source(self, source: str) -> "TopologyError":
        """The same error, naming ``source`` (a file path)."""
        return TopologyError(self.message, line=self.line, source=source)


@dataclass
class ParseReport:
    """What a parser made of its input: ``spec`` (the result), ``lines`` (lines read),
    ``skipped`` (lines it did not recognise and left out: ``(1-based line number, text)``,
    text cut to 200 characters) and ``notes`` (things the result does not show, one sentence
    each: nodes named by GUID because their description names nothing, cables that are not
    host-to-switch, neighbours dropped ...)."""

    spec: TopologySpec
    lines: int = 0
    skipped: list[tuple[int, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# -- GUIDs --------------------------------------------------------------------------------------

_GUID_TEXT = r"(?:0x)?[0-9a-fA-F]{1,16}"
_GUID_KEY = re.compile(r"0x[0-9a-fA-F]{1,16}|[0-9a-fA-F]{16}")


# one GUID form for the whole project: correlators.ids
_guid = parse_guid
_fmt = format_guid
normalize_guid = normalise_guid


# -- ibnetdiscover ------------------------------------------------------------------------------

_HEADER = re.compile(
    r"^(?P<key>vendid|devid|sysimgguid|switchguid|caguid|rtguid)=(?P<value>[^\s#]*)\s*(?:#.*)?$")
_GUID_PAIR = re.compile(rf"^(?P<node>{_GUID_TEXT})(?:\((?P<port>{_GUID_TEXT})\))?$")
_NODE = re.compile(
    rf'^(?P<kind>Switch|Ca|Rt)\s+(?P<ports>\d+)\s+"(?P<t>[SHR])-(?P<guid>{_GUID_TEXT})"\s*'
    r'#\s*"(?P<desc>.*)"(?P<rest>.*)$')
_SWITCH_REST = re.compile(r"^\s*(?:enhanced|base)\s+port\s+0\s+lid\s+\d+\s+lmc\s+\d+\b.*$")
_REMOTE = (rf'"(?P<rt>[SHR])-(?P<rg>{_GUID_TEXT})"\[(?P<rp>\d+)\](?:\[ext \d+\])?'
           rf"(?:\s*\((?P<rpg>{_GUID_TEXT})\))?")
_SWITCH_PORT = re.compile(rf"^\[(?P<p>\d+)\](?:\[ext \d+\])?\s*{_REMOTE}\s*(?P<rest>.*)$")
_CA_PORT = re.compile(rf"^\[(?P<p>\d+)\]\((?P<pg>{_GUID_TEXT})\)\s*{_REMOTE}\s*(?P<rest>.*)$")
_SWITCH_PORT_REST = re.compile(r'^#\s*"(?P<desc>.*)"\s+lid\s+\d+\b.*$')
_CA_PORT_REST = re.compile(r'^#\s*lid\s+\d+\s+lmc\s+\d+\s+"(?P<desc>.*)"\s+lid\s+\d+\b.*$')
# -g (grouping) output adds these structural lines; they carry nothing we use
_GROUPING = re.compile(r"^(?:Chassis\s+\d+\b.*|Non-Chassis Nodes|Hostname:.*)$")
# ``ibnetdiscover -p`` (ports report) lines: "CA    12  1 0x... 4x ..." -- another format
_PORTS_REPORT = re.compile(r"^(?:SW|CA|RT)\s+\d+\s+\d+\s+0x[0-9a-fA-F]+\s")
# a kernel RDMA device name as the default CA NodeDescription "<hostname> <ibdev>" carries it
_RDMA_DEVICE = re.compile(r"[a-z][a-z0-9_]*[0-9]")
_TRAILING_COMMENT = re.compile(r"\s*\([^()]*\)\s*$")
_KIND = {"Switch": "S", "Ca": "H", "Rt": "R"}
_KIND_WORD = {"S": "switch", "H": "CA", "R": "router"}


@dataclass
class _Node:
    guid: int
    kind: str  # "S" switch, "H" channel adapter, "R" router (ibnetdiscover's node id prefix)
    desc: str | None = None  # from its own Switch/Ca/Rt line
    seen_desc: str | None = None  # from a neighbour's port line
    ports: int | None = None
    line: int | None = None
    port_guid0: int | None = None  # switch: the port-0 GUID of switchguid=0x<node>(<port>)
    port_guids: dict[int, int] = field(default_factory=dict)  # CA/router port -> port GUID

    @property
    def ident(self) -> str:
        return f"{self.kind}-{self.guid:016x}"

    @property
    def description(self) -> str | None:
        return self.desc if self.desc is not None else self.seen_desc


class _IbnetdiscoverReader:
    """One pass over ibnetdiscover output: nodes and cables, checked for consistency."""

    def __init__(self) -> None:
        self.nodes: dict[int, _Node] = {}
        self.cables: dict[tuple[int, int], tuple[int, int, int]] = {}  # (node, port) -> (node, port, line)
        self.skipped: list[tuple[int, str]] = []
        self.lines = 0

    def node(self, guid: int, kind: str, line: int) -> _Node:
        node = self.nodes.get(guid)
        if node is None:
            node = self.nodes[guid] = _Node(guid, kind)
        elif node.kind != kind:
            raise TopologyError(f"node {guid:016x} is a {_KIND_WORD[node.kind]} elsewhere and a "
                                f"{_KIND_WORD[kind]} here", line=line)
        return node

    def cable(self, a: tuple[int, int], b: tuple[int, int], line: int) -> None:
        for x, y in ((a, b), (b, a)):
            old = self.cables.get(x)
            if old is None:
                self.cables[x] = (y[0], y[1], line)
            elif old[:2] != y:
                raise TopologyError(
                    f"port {self._port(x)} is cabled to {self._port(y)} here but to "
                    f"{self._port(old[:2])} at line {old[2]}", line=line)

    def _port(self, end: tuple[int, int]) -> str:
        return f"{self.nodes[end[0]].ident}[{end[1]}]"

    def read(self, text: str) -> None:
        header: dict[str, tuple[int, int | None]] = {}  # key -> (guid or value, port guid)
        header_line: int | None = None
        current: _Node | None = None
        n = 0
        for n, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line:
                if header_line is not None:
                    raise TopologyError(f"the block that starts at line {header_line} has no "
                                        "Switch/Ca/Rt line (truncated output?)", line=n)
                current = None
                continue
            if line.startswith("#"):
                continue
            m = _HEADER.match(line)
            if m:
                if current is not None:  # a new block without the blank line between
                    current = None
                key = m["key"]
                if key in header:
                    raise TopologyError(f"{key}= repeated: the block that starts at line "
                                        f"{header_line} has no Switch/Ca/Rt line", line=n)
                value = _GUID_PAIR.match(m["value"])
                if value is None:
                    raise TopologyError(f"{key}= value {m['value']!r} is not hexadecimal", line=n)
                port = value["port"]
                header[key] = (_guid(value["node"]), _guid(port) if port else None)
                header_line = header_line or n
                continue
            if line.startswith(("Switch", "Ca", "Rt")) and re.match(r"^(?:Switch|Ca|Rt)\s", line):
                current = self._node_line(line, n, header)
                header, header_line = {}, None
                continue
            if line.startswith("["):
                if header_line is not None:
                    raise TopologyError("port line before the Switch/Ca/Rt line of the block that "
                                        f"starts at line {header_line} (truncated output?)", line=n)
                if current is None:
                    raise TopologyError("port line outside a Switch/Ca/Rt block", line=n)
                self._port_line(current, line, n)
                continue
            if _GROUPING.match(line):
                continue
            if _PORTS_REPORT.match(line) and not self.nodes:
                raise TopologyError("this is 'ibnetdiscover -p' (ports report) output; give the "
                                    "normal topology output (ibnetdiscover without -p)", line=n)
            self.skipped.append((n, line[:200]))
        self.lines = n
        if header_line is not None:
            raise TopologyError(f"the block that starts at line {header_line} has no Switch/Ca/Rt "
                                "line (truncated output?)", line=n)

    def _node_line(self, line: str, n: int, header: dict[str, tuple[int, int | None]]) -> _Node:
        m = _NODE.match(line)
        if m is None:
            raise TopologyError(f"malformed {line.split()[0]} line (expected "
                                '<type> <ports> "<id>" # "<description>" ...)', line=n)
        kind = _KIND[m["kind"]]
        if m["t"] != kind:
            raise TopologyError(f"{m['kind']} line with a {m['t']}- node id", line=n)
        if kind == "S" and not _SWITCH_REST.match(m["rest"]):
            raise TopologyError("malformed Switch line: no 'port 0 lid <lid> lmc <lmc>' after the "
                                "description (truncated?)", line=n)
        guid = _guid(m["guid"])
        key = {"S": "switchguid", "H": "caguid", "R": "rtguid"}[kind]
        if key in header and header[key][0] != guid:
            raise TopologyError(f"{m['kind']} {guid:016x} follows {key}=0x{header[key][0]:x}", line=n)
        node = self.node(guid, kind, n)
        if node.desc is not None:
            raise TopologyError(f"node {node.ident} is described twice (first at line {node.line})",
                                line=n)
        node.desc, node.ports, node.line = m["desc"], int(m["ports"]), n
        if kind == "S" and key in header:
            node.port_guid0 = header[key][1]
        return node

    def _port_line(self, node: _Node, line: str, n: int) -> None:
        m = (_SWITCH_PORT if node.kind == "S" else _CA_PORT).match(line)
        rest = (_SWITCH_PORT_REST if node.kind == "S" else _CA_PORT_REST).match(m["rest"]) if m else None
        if m is None or (m["rest"] and rest is None):
            raise TopologyError(f"malformed port line of {node.ident} (bad GUID, port number or "
                                "comment, or a truncated line)", line=n)
        port, rport = int(m["p"]), int(m["rp"])
        if port < 1 or (node.ports is not None and port > node.ports):
            raise TopologyError(f"port {port} of {node.ident}, which has {node.ports} ports", line=n)
        if rport < 1:
            raise TopologyError(f"remote port {rport}: ports are numbered from 1", line=n)
        remote = self.node(_guid(m["rg"]), m["rt"], n)
        if rest is not None and remote.seen_desc is None:
            remote.seen_desc = rest["desc"]
        if node.kind != "S":
            node.port_guids.setdefault(port, _guid(m["pg"]))
        if m["rpg"] and remote.kind != "S":
            remote.port_guids.setdefault(rport, _guid(m["rpg"]))
        self.cable((node.guid, port), (remote.guid, rport), n)


def _lookup(names: Mapping[str, str], node: _Node) -> str | None:
    """The ``host_names`` entry for ``node``: by node GUID, port GUID, description."""
    keys = [_fmt(node.guid)]
    keys += [_fmt(g) for g in ([node.port_guid0] if node.port_guid0 else [])]
    keys += [_fmt(g) for _, g in sorted(node.port_guids.items())]
    for key in keys:
        if key in names:
            return names[key]
    if node.description is not None and node.description in names:
        return names[node.description]
    return None


def _normalise_names(host_names: Mapping[str, str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in (host_names or {}).items():
        k = key.strip()
        out[_fmt(_guid(k)) if _GUID_KEY.fullmatch(k) else k] = value
    return out


def _switch_name(desc: str | None) -> str | None:
    """``MF0;leaf-01:MQM8700/U1`` -> ``leaf-01``; None when the description is a vendor text
    (contains blanks) or empty."""
    if desc is None:
        return None
    text = _TRAILING_COMMENT.sub("", desc.strip())
    text = re.sub(r"^MF\d+;", "", text)
    text = re.sub(r":[\w.-]+/[\w.-]+$", "", text)
    return text if text and not re.search(r"\s", text) else None


def _ca_name(desc: str | None) -> tuple[str, str | None] | None:
    """``node-a01 mlx5_0`` -> (node-a01, mlx5_0); ``node-a01 HCA-1`` -> (node-a01, None);
    None when the description is not ``<host>`` or ``<host> <device>``."""
    if desc is None:
        return None
    words = _TRAILING_COMMENT.sub("", desc.strip()).split()
    if not 1 <= len(words) <= 2:
        return None
    device = words[1] if len(words) == 2 and _RDMA_DEVICE.fullmatch(words[1]) else None
    return words[0], device


def read_ibnetdiscover(text: str, *, host_names: Mapping[str, str] | None = None) -> ParseReport:
    """Parse ``ibnetdiscover`` topology output into a :class:`ParseReport` (see
    :func:`parse_ibnetdiscover` for what becomes what).

    Recognised lines: ``#`` comments, blank lines (block separators), the block headers
    ``vendid=``, ``devid=``, ``sysimgguid=``, ``switchguid=0x<node>(<port0>)``, ``caguid=``,
    ``rtguid=``, the node lines ``Switch <ports> "S-<guid>" # "<desc>" enhanced|base port 0 lid
    <lid> lmc <lmc>``, ``Ca <ports> "H-<guid>" # "<desc>"``, ``Rt ...``, their port lines
    (switch: ``[<port>] "<H|S>-<guid>"[<rport>](<rport guid>) # "<remote desc>" lid <lid>
    <width><speed>``; CA: ``[<port>](<port guid>) "S-<guid>"[<rport>] # lid <lid> lmc <lmc>
    "<remote desc>" lid <lid> <width><speed>``; ``[ext N]`` tags of ``-g`` allowed) and the
    ``-g`` lines ``Chassis N``, ``Non-Chassis Nodes``, ``Hostname:``. Any other line is
    skipped and listed in ``report.skipped``.

    Raises :class:`TopologyError` (with the line number) for a malformed node or port line
    (bad GUID, missing quote, truncated line), a block header with no node line (truncated
    output), a port line outside a block, a port number beyond the node's port count, a port
    cabled to two different ports, and ``ibnetdiscover -p`` output."""
    reader = _IbnetdiscoverReader()
    reader.read(text)
    names = _normalise_names(host_names)
    notes: list[str] = []

    switch_names: dict[int, str] = {}
    by_name: dict[str, list[int]] = defaultdict(list)
    for guid, node in sorted(reader.nodes.items()):
        if node.kind != "S":
            continue
        mapped = _lookup(names, node)
        name = _switch_name(mapped if mapped is not None else node.description)
        if name is None:
            notes.append(f"switch {node.ident} ({node.description!r}) has no name in its "
                         "description: named by its id")
            name = node.ident
        switch_names[guid] = name
        by_name[name].append(guid)
    for name, guids in sorted(by_name.items()):
        if len(guids) > 1:
            for guid in guids:
                switch_names[guid] = reader.nodes[guid].ident
            notes.append(f"{len(guids)} switches are described as {name!r}: named by their ids "
                         f"({', '.join(reader.nodes[g].ident for g in guids)})")

    hosts: dict[int, tuple[str, str | None] | None] = {}
    for guid, node in sorted(reader.nodes.items()):
        if node.kind != "H":
            continue
        desc = node.description or ""
        if "Aggregation Node" in desc:  # SHARP aggregation node inside a switch, not a host
            hosts[guid] = None
            notes.append(f"{node.ident} is a SHARP aggregation node ({desc!r}): left out")
            continue
        mapped = _lookup(names, node)
        named = _ca_name(mapped if mapped is not None else desc)
        if named is None:
            notes.append(f"CA {node.ident} ({desc!r}) names no host: named by its id")
            named = (node.ident, None)
        hosts[guid] = named

    links: list[Link] = []
    uplinks: list[tuple[str, str]] = []
    for (g, p), (rg, rp, _line) in sorted(reader.cables.items()):
        a, b = reader.nodes[g], reader.nodes[rg]
        if (a.kind, g, p) > (b.kind, rg, rp):
            continue  # every cable is stored from both ends; take it once
        if a.kind == "H" and b.kind == "S":
            named = hosts[g]
            if named is None:
                continue
            host, device = named
            port_guid = a.port_guids.get(p)
            links.append(Link(
                host=host, hca=device or _fmt(port_guid if port_guid is not None else a.guid),
                host_port=p, switch=switch_names[rg], switch_port=str(rp),
                hca_guid=_fmt(port_guid) if port_guid is not None else None,
                switch_guid=_fmt(b.port_guid0 or b.guid),
            ))
        elif a.kind == "S" and b.kind == "S":
            uplinks.append((f"{switch_names[g]}/{p}", f"{switch_names[rg]}/{rp}"))
        else:
            notes.append(f"cable {a.ident}[{p}] - {b.ident}[{rp}] is not host-to-switch or "
                         "switch-to-switch: left out")
    spec = merge_topology(TopologySpec(links=links, uplinks=uplinks))
    return ParseReport(spec=spec, lines=reader.lines, skipped=reader.skipped, notes=notes)


def parse_ibnetdiscover(text: str, *, host_names: Mapping[str, str] | None = None) -> TopologySpec:
    """Cables of an InfiniBand fabric from ``ibnetdiscover`` output (infiniband-diags /
    rdma-core, the normal topology output; see :func:`read_ibnetdiscover` for the lines it
    reads, what it skips and the errors it raises -- use that to get the skipped lines).

    Result: one :class:`~schemas.bundle.Link` per host-to-switch cable, ``uplinks`` for
    switch-to-switch cables (``("leaf-01/33", "spine-01/1")``, each pair sorted), no ``hosts``
    or ``domains``; sorted as :func:`merge_topology` sorts.

    Naming (``host_names`` first: a mapping whose keys are node or port GUIDs -- ``0x`` +
    hex, or 16 hex digits -- or full node descriptions, and whose values replace the node's
    description, as ibnetdiscover's ``--node-name-map`` does; see
    :func:`parse_node_name_map`):

    * a switch is named by its description without Mellanox's ``MF0;`` prefix and
      ``:<model>/<unit>`` suffix (``"MF0;leaf-01:MQM8700/U1"`` -> ``leaf-01``); a description
      that still contains blanks is a vendor text (``"Quantum Mellanox Technologies"``), not a
      name, and two switches with the same name are ambiguous: those switches are named by
      their ibnetdiscover id ``S-<16 hex>`` (noted in the report);
    * a CA description ``"<host> <device>"`` (the kernel's default NodeDescription, e.g.
      ``"node-a01 mlx5_0"``) gives ``host`` and ``hca``. When the second word is not a kernel
      RDMA device name (``"node-a01 HCA-1"`` from older OFED stacks, where ``HCA-1`` is only an
      ordinal), ``hca`` is the CA port's GUID (``0xb8599f0300f3d2a5``; BUNDLE.md allows a
      port GUID as ``hca``) -- it is unique, and kernel and fabric lines that carry the GUID
      find the cable by ``hca_guid`` anyway. A description of more than two words names no
      host (``H-<16 hex>`` is used and noted); SHARP aggregation nodes are left out;
    * ``host_port`` is the CA port number, ``switch_port`` the switch port number (text),
      ``hca_guid`` the CA port GUID, ``switch_guid`` the switch's port-0 GUID (its node GUID
      when the ``switchguid=`` header is missing).
    """
    return read_ibnetdiscover(text, host_names=host_names).spec


def parse_node_name_map(text: str) -> dict[str, str]:
    """An ibnetdiscover node name map (``ibnetdiscover(8)``, NODE NAME MAP FILE FORMAT: lines
    ``<guid> "<name>"``, ``#`` comments) as ``{"0x<16 hex>": name}``, usable as the
    ``host_names`` of :func:`parse_ibnetdiscover`. Raises :class:`TopologyError` naming the
    line for anything else."""
    out: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(rf'({_GUID_TEXT})\s+"(.*)"(?:\s*#.*)?', line)
        if m is None:
            raise TopologyError('expected <guid> "<name>"', line=n)
        out[_fmt(_guid(m[1]))] = m[2]
    return out


# -- lldpctl ------------------------------------------------------------------------------------


def _json_documents(text: str) -> list[Any]:
    """Every JSON document in ``text`` (``lldpcli`` prints one per command)."""
    decoder = json.JSONDecoder()
    docs, pos = [], 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            break
        try:
            doc, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise TopologyError(f"invalid JSON: {exc.msg} (column {exc.colno})", line=exc.lineno) from None
        docs.append(doc)
    if not docs:
        raise TopologyError("no JSON document (empty lldpctl output)")
    return docs


def _first(value: Any) -> Any:
    if isinstance(value, list):
        return value[0] if value else None
    return value


def _text(value: Any) -> str | None:
    """The string of a cleaned (``"x"``, ``{"value": "x"}``) or json0 (``[{"value": "x"}]``) leaf."""
    value = _first(value)
    if isinstance(value, dict):
        value = _first(value.get("value"))
    return value.strip() if isinstance(value, str) and value.strip() else None


@dataclass
class _Neighbour:
    interface: str
    switch: str
    port: str
    bridge: bool


def _neighbour(interface: str, body: Any, json0: bool) -> _Neighbour | None:
    if not isinstance(body, dict):
        raise TopologyError(f"interface {interface}: not an object")
    chassis = _first(body.get("chassis"))
    port = _first(body.get("port"))
    if chassis is None and port is None:
        return None  # an interface without a neighbour
    if not isinstance(chassis, dict) or not isinstance(port, dict):
        raise TopologyError(f"interface {interface}: neighbour without chassis or port object")
    name = None
    if json0:
        name = _text(chassis.get("name"))
    elif len(chassis) == 1:
        key, value = next(iter(chassis.items()))
        if key != "id" and isinstance(value, dict):
            name, chassis = key, value
    chassis_id = _text(chassis.get("id"))
    switch = name or chassis_id
    if switch is None:
        raise TopologyError(f"interface {interface}: neighbour has neither a system name nor a chassis id")
    pid = _first(port.get("id"))
    ptype = pid.get("type") if isinstance(pid, dict) else None
    pvalue = _text(pid)
    descr = _text(port.get("descr"))
    chosen = pvalue if ptype == "ifname" else descr or pvalue
    if chosen is None:
        raise TopologyError(f"interface {interface}: neighbour {switch} has no port id")
    caps = chassis.get("capability")
    caps = caps if isinstance(caps, list) else [caps]
    bridge = any(isinstance(c, dict) and c.get("type") in ("Bridge", "Router") and c.get("enabled") is True
                 for c in caps)
    return _Neighbour(interface, switch, chosen, bridge)


def _interfaces(doc: Any) -> Iterator[tuple[str, Any, bool]]:
    """(interface name, interface object, is json0) of one lldpctl document."""
    if not isinstance(doc, dict) or "lldp" not in doc:
        raise TopologyError("not lldpctl JSON output: no top-level 'lldp' object")
    lldp = doc["lldp"]
    if isinstance(lldp, list):  # -f json0
        for part in lldp:
            for iface in (part or {}).get("interface", []) if isinstance(part, dict) else []:
                if not isinstance(iface, dict) or not isinstance(iface.get("name"), str):
                    raise TopologyError("json0 interface without a name")
                yield iface["name"], iface, True
        return
    if not isinstance(lldp, dict):
        raise TopologyError("not lldpctl JSON output: 'lldp' is neither an object nor a list")
    interfaces = lldp.get("interface") or []
    for entry in interfaces if isinstance(interfaces, list) else [interfaces]:
        if not isinstance(entry, dict):
            raise TopologyError("an 'interface' entry is not an object")
        for name, body in entry.items():
            yield name, body, False


def read_lldpctl_json(text: str, host: str) -> ParseReport:
    """Parse ``lldpctl -f json`` / ``-f json0`` output of ``host`` into a :class:`ParseReport`
    (see :func:`parse_lldpctl_json`). ``notes`` lists neighbours left out because their
    interface had a better one. Raises :class:`TopologyError` for invalid JSON (with the line
    number), output that is not lldpctl's, and a neighbour without a chassis id or port id."""
    by_interface: dict[str, list[_Neighbour]] = defaultdict(list)
    for doc in _json_documents(text):
        for name, body, json0 in _interfaces(doc):
            nb = _neighbour(name, body, json0)
            if nb is not None:
                by_interface[name].append(nb)
    links, notes = [], []
    for interface, found in sorted(by_interface.items()):
        candidates = [nb for nb in found if nb.bridge] or found
        chosen = candidates[0]
        for nb in found:
            if nb is not chosen:
                notes.append(f"{host} {interface}: neighbour {nb.switch}/{nb.port} left out, "
                             f"{chosen.switch}/{chosen.port} kept")
        links.append(Link(host=host, hca=interface, host_port=1, switch=chosen.switch,
                          switch_port=chosen.port, netdev=interface))
    return ParseReport(spec=merge_topology(TopologySpec(links=links)),
                       lines=len(text.splitlines()), notes=notes)


def parse_lldpctl_json(text: str, host: str) -> TopologySpec:
    """The Ethernet (RoCE) cables of ``host`` from its ``lldpctl -f json`` output (lldpd; the
    ``interface`` member is a dict ``{"eth0": {...}}`` for one neighbour and a list of
    one-key dicts for several, see lldpd ``src/client/json_writer.c``) or ``-f json0``.

    One :class:`~schemas.bundle.Link` per local interface with an LLDP neighbour:
    ``hca`` = ``netdev`` = the local interface name, ``host_port`` = 1, ``switch`` = the
    neighbour's system name (its chassis id, e.g. a MAC, when it sends none), ``switch_port``
    = the port id when its subtype is ``ifname`` (``Ethernet12``), else the port description
    (switches that send a MAC or local id describe the port by name there), else the port id
    whatever its subtype. An interface with several neighbours keeps the first that advertises
    an enabled Bridge or Router capability (else the first); the others are noted by
    :func:`read_lldpctl_json`."""
    return read_lldpctl_json(text, host).spec


# -- host addresses -----------------------------------------------------------------------------

_CSV_HEADER = ({"host", "hostname", "name", "node"}, {"ip", "address", "addr", "ip_address"})


def _ip(text: str, line: int) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        raise TopologyError(f"{text.strip()!r} is not an IP address", line=line) from None


def _ip_key(text: str) -> tuple[int, int, str]:
    try:
        ip = ipaddress.ip_address(text.split("%", 1)[0])
        return (ip.version, int(ip), text)
    except ValueError:
        return (99, 0, text)


def parse_hosts_map(text: str) -> dict[str, list[str]]:
    """Host -> addresses from an ``/etc/hosts``-style file or a ``host,ip`` CSV.

    The format is told by content: CSV when the first line that is not blank or a ``#``
    comment contains a comma.

    * hosts file (``hosts(5)``): ``<address> <canonical name> [<aliases>...]``, ``#`` starts a
      comment. The host is the first name without a dot on the line (logs name hosts by their
      short name: ``10.0.0.11 node-a01.cluster.internal node-a01`` -> ``node-a01``), else the
      first name. Loopback, multicast, unspecified and reserved addresses (``127.0.1.1``,
      ``::1``, ``ff02::1``, ``fe00::0``) are not fabric addresses and are left out.
    * CSV: exactly two columns ``host,ip`` per row (blanks around fields ignored), an optional
      header row (``host,ip``), ``#`` comment rows.

    Addresses are normalised by :mod:`ipaddress` (``str(ip_address(...))``); each host's list
    is deduplicated and sorted (IPv4 before IPv6, numerically). Raises :class:`TopologyError`
    naming the line for an invalid address, a line without a host name, a CSV row with other
    than two columns, and an address given to two hosts."""
    lines = text.splitlines()
    first = next((ln.split("#", 1)[0] for ln in lines if ln.split("#", 1)[0].strip()), None)
    if first is None:
        return {}
    owner: dict[str, tuple[str, int]] = {}
    out: dict[str, set[str]] = defaultdict(set)

    def add(host: str, ip: str, n: int) -> None:
        seen = owner.get(ip)
        if seen is not None and seen[0] != host:
            raise TopologyError(f"address {ip} belongs to {seen[0]} (line {seen[1]}) and to {host}", line=n)
        owner.setdefault(ip, (host, n))
        out[host].add(ip)

    if "," in first:
        header_done = False
        reader = csv.reader(io.StringIO(text))
        for row in reader:
            n = reader.line_num
            cells = [c.strip() for c in row]
            while cells and not cells[-1]:
                cells.pop()
            if not cells or cells[0].startswith("#"):
                continue
            if not header_done:
                header_done = True
                if len(cells) == 2 and cells[0].lower() in _CSV_HEADER[0] and cells[1].lower() in _CSV_HEADER[1]:
                    continue
            if len(cells) != 2 or not cells[0]:
                raise TopologyError(f"expected 2 columns host,ip, got {len(cells)}", line=n)
            add(cells[0], str(_ip(cells[1], n)), n)
    else:
        for n, raw in enumerate(lines, 1):
            fields = raw.split("#", 1)[0].split()
            if not fields:
                continue
            ip = _ip(fields[0], n)
            if len(fields) < 2:
                raise TopologyError(f"address {fields[0]} without a host name", line=n)
            if ip.is_loopback or ip.is_multicast or ip.is_unspecified or ip.is_reserved:
                continue
            names = fields[1:]
            host = next((name for name in names if "." not in name), names[0])
            add(host, str(ip), n)
    return {host: sorted(ips, key=_ip_key) for host, ips in sorted(out.items())}


def hosts_topology(hosts: Mapping[str, Iterable[str]]) -> TopologySpec:
    """A :class:`TopologySpec` with only ``hosts`` (host -> addresses), e.g. from
    :func:`parse_hosts_map`."""
    return merge_topology(TopologySpec(hosts={h: TopologyHost(ips=list(ips)) for h, ips in hosts.items()}))


def parse_topology_yaml(text: str) -> TopologySpec:
    """A ``topology.yaml`` (``BUNDLE.md`` v1) as a validated :class:`TopologySpec`. Raises
    :class:`TopologyError` for invalid YAML (with the line) or a document the model rejects
    (naming the fields)."""
    try:
        data = load_yaml(text)  # schemas.yamlspec: switch port 1:17 stays "1:17"
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise TopologyError(f"invalid YAML: {getattr(exc, 'problem', None) or exc}",
                            line=mark.line + 1 if mark is not None else None) from None
    if data is None:
        return TopologySpec()
    if not isinstance(data, dict):
        raise TopologyError("topology.yaml must be a mapping (links, hosts, domains, uplinks)")
    try:
        return TopologySpec.model_validate(data)
    except pydantic.ValidationError as exc:
        raise TopologyError("invalid topology: " + _errors(exc)) from None


def _errors(exc: pydantic.ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors()[:5])


# -- merging ------------------------------------------------------------------------------------

_LINK_OPTIONAL = ("netdev", "pci", "hca_guid", "switch_guid")


def _merge_link(a: Link, b: Link) -> Link:
    if (a.switch, a.switch_port) != (b.switch, b.switch_port):
        raise TopologyError(f"{a.host} {a.hca} port {a.host_port} is cabled to {a.port_id} in one "
                            f"source and to {b.port_id} in another")
    update: dict[str, Any] = {}
    for name in _LINK_OPTIONAL:
        x, y = getattr(a, name), getattr(b, name)
        if x is not None and y is not None and x != y:
            raise TopologyError(f"{a.host} {a.hca} port {a.host_port}: {name} is {x} in one source "
                                f"and {y} in another")
        if x is None and y is not None:
            update[name] = y
    return a.model_copy(update=update) if update else a


def merge_topology(*specs: TopologySpec) -> TopologySpec:
    """The union of ``specs`` in a canonical order, so the same inputs always give the same
    (byte-identical when serialised) spec whatever their order:

    * ``links`` deduplicated by ``(host, hca, host_port)`` and sorted by it; two links of that
      key must agree on ``switch``/``switch_port`` and on any optional field both give (the
      other's missing fields are filled in);
    * ``hosts``: addresses merged, deduplicated, sorted (IPv4 before IPv6, numerically); hosts
      sorted by name; an address may belong to one host only;
    * ``domains``: members merged, deduplicated and sorted; domains sorted by name;
    * ``uplinks``: each pair sorted, deduplicated, sorted.

    Raises :class:`TopologyError` on a conflict (a cable or an address claimed twice)."""
    links: dict[tuple[str, str, int], Link] = {}
    hosts: dict[str, set[str]] = {}
    owner: dict[str, str] = {}
    domains: dict[str, set[str]] = defaultdict(set)
    uplinks: set[tuple[str, str]] = set()
    for spec in specs:
        for link in spec.links:
            key = (link.host, link.hca, link.host_port)
            links[key] = _merge_link(links[key], link) if key in links else link.model_copy()
        for host, facts in spec.hosts.items():
            ips = hosts.setdefault(host, set())  # a host listed without addresses stays listed
            for ip in facts.ips:
                if owner.setdefault(ip, host) != host:
                    raise TopologyError(f"address {ip} belongs to {owner[ip]} and to {host}")
                ips.add(ip)
        for name, members in spec.domains.items():
            domains[name].update(members)
        for a, b in spec.uplinks:
            uplinks.add((a, b) if a <= b else (b, a))
    return TopologySpec(
        links=[links[k] for k in sorted(links)],
        hosts={h: TopologyHost(ips=sorted(hosts[h], key=_ip_key)) for h in sorted(hosts)},
        domains={d: sorted(domains[d]) for d in sorted(domains)},
        uplinks=sorted(uplinks),
    )


# -- the record ---------------------------------------------------------------------------------


def topology_observation(spec: TopologySpec, cluster: str, at_ns: int) -> Observation:
    """The record of ``cluster``'s topology on the ``topology`` topic: ``kind="topology"``,
    ``host="_fabric"``, ``cluster``, ``source=Source(connector="topology", instance=cluster)``,
    ``format="topology"``, ``attributes={"topology": spec.model_dump(mode="json")}``,
    ``observed_at=at_ns`` (UTC ns, when it was read), ``time_source="transport"`` with
    :data:`~schemas.records.TIME_QUALITY_TRANSPORT`; id filled (``with_id()``)."""
    return Observation(
        source=Source(connector="topology", instance=cluster),
        kind="topology",
        observed_at=at_ns,
        time_source="transport",
        time_quality=TIME_QUALITY_TRANSPORT,
        host=FABRIC_HOST,
        cluster=cluster,
        format="topology",
        attributes={"topology": spec.model_dump(mode="json")},
    ).with_id()


def topology_from_observation(obs: Observation | Mapping[str, Any]) -> TopologySpec:
    """The :class:`TopologySpec` carried by a topology record (an Observation, or its JSON
    object as consumed from Kafka). Works for this connector's records and for the bundle
    publisher's ``topology.yaml`` record. Raises :class:`TopologyError` when the record is not
    an Observation, not ``kind="topology"``, has no ``attributes.topology`` object, or that
    object is not a valid TopologySpec."""
    if not isinstance(obs, Observation):
        try:
            obs = Observation.model_validate(obs)
        except pydantic.ValidationError as exc:
            raise TopologyError("malformed topology record: not an Observation: " + _errors(exc)) from None
    ident = obs.observation_id or "(no id)"
    if obs.kind != "topology":
        raise TopologyError(f"record {ident} is a {obs.kind!r} observation, not a topology")
    data = obs.attributes.get("topology")
    if not isinstance(data, dict):
        raise TopologyError(f"malformed topology record {ident}: no attributes.topology object")
    try:
        return TopologySpec.model_validate(data)
    except pydantic.ValidationError as exc:
        raise TopologyError(f"malformed topology record {ident}: " + _errors(exc)) from None
