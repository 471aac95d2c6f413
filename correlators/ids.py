"""Identifier normalisation: one canonical text per kind of id, whichever tool printed it.

Logs, telemetry dumps, topology files and fabric tools name the same GPU, host address, HCA
port or switch port in different spellings. Every module that compares or keys on such an id
normalises it here, so an Xid line, an nvidia-smi dump and a workload's GPU table agree.

============  ==========================  ==================================  ===============
kind          function                    canonical form                      not that kind
============  ==========================  ==================================  ===============
PCI device    :func:`normalise_pci`       ``0000:9c:00`` (GPU ids in events)  None
PCI function  :func:`normalise_bdf`       ``0000:01:00.1`` (HCA functions)    None
NCCL busId    :func:`pci_from_nccl_busid` ``0000:00:06``                      None
IP address    :func:`parse_address`       ``10.0.0.15`` / ``fe80::1``         None
peer          :func:`normalise_peer`      ``10.0.0.15:38560`` / host name     text unchanged
GID           :func:`normalise_gid`       ``fe80::ba3f:d2ff:fe11:2233``       None
GUID          :func:`normalise_guid`      ``0x0c42a10300b1e2f1``              ValueError
switch port   :func:`normalise_switch_port` ``17`` (IB) / ``Eth1/12``         text unchanged
============  ==========================  ==================================  ===============

Returning None (PCI ids, addresses, GIDs): these come from log lines and telemetry fields,
where ``N/A`` or a host name in place of an id is ordinary input; the caller treats it as "the
line names no such id". Raising ValueError (GUIDs): GUIDs come from topology input
(``ibnetdiscover``, node-name maps), where a malformed GUID is an error in the file that the
parser reports with its line. Every function accepts ``None`` where it returns None.

Pure functions of their text; no I/O.
"""

from __future__ import annotations

import functools
import ipaddress
import re

__all__ = [
    "format_guid",
    "normalise_bdf",
    "normalise_gid",
    "normalise_guid",
    "normalise_peer",
    "normalise_pci",
    "normalise_switch_port",
    "parse_address",
    "parse_guid",
    "pci_from_nccl_busid",
]

# --------------------------------------------------------------------------- PCI

# [PCI:][domain:]bus:device[.function], hex, any case; nvidia-smi prints an 8-digit domain
# (00000000:9C:00.0), the driver's Xid lines a 4-digit one without function (0000:9c:00), VMD
# domains have 5 digits (10000:e1:00.0); lspci without -D prints no domain (9c:00.0).
_PCI = re.compile(
    r"(?:pci:)?(?:(?P<domain>[0-9a-f]{1,8}):)?(?P<bus>[0-9a-f]{1,2}):(?P<dev>[0-9a-f]{1,2})"
    r"(?:\.(?P<fn>[0-7]))?",
    re.IGNORECASE,
)


def _pci_parts(text: str | None) -> tuple[int, int, int, int | None] | None:
    if not text:
        return None
    m = _PCI.fullmatch(text.strip())
    if m is None:
        return None
    dev = int(m["dev"], 16)
    if dev > 0x1F:  # 5-bit device number
        return None
    fn = int(m["fn"]) if m["fn"] is not None else None
    return int(m["domain"] or "0", 16), int(m["bus"], 16), dev, fn


@functools.lru_cache(maxsize=65536)  # a fleet has a few PCI ids per node; the hot path repeats them
def normalise_pci(text: str | None) -> str | None:
    """A PCI device address as logs and tools print it -> ``dddd:bb:dd``: domain (at least 4
    hex digits), bus and device in lower-case hex, the function dropped. This is the form of
    ``GpuRef.pci_bus_id`` in every Observation and Event and the key of GPU tables.

    ``PCI:0000:9C:00`` (driver Xid lines), ``00000000:9C:00.0`` (nvidia-smi, 8-digit domain),
    ``0000:9c:00.0`` (sysfs, lspci -D), ``9c:00.0`` (lspci, no domain: domain 0) all give
    ``0000:9c:00``. Returns None for None, empty text and text that is not one PCI address
    (``N/A``, a device number above 0x1f, a function above 7, surrounding words)."""
    parts = _pci_parts(text)
    if parts is None:
        return None
    domain, bus, dev, _ = parts
    return f"{domain:04x}:{bus:02x}:{dev:02x}"


def normalise_bdf(text: str | None) -> str | None:
    """A PCI function address (bus/device/function) -> ``dddd:bb:dd.f`` lower-case.

    For ids where the function matters: the ports of a dual-port HCA are functions ``.0`` and
    ``.1`` of one device (``mlx5_core 0000:01:00.1: ...``). ``01:00.1`` (no domain) gives
    ``0000:01:00.1``. Returns None when the text is not a PCI address or names no function."""
    parts = _pci_parts(text)
    if parts is None or parts[3] is None:
        return None
    domain, bus, dev, fn = parts
    return f"{domain:04x}:{bus:02x}:{dev:02x}.{fn}"


def pci_from_nccl_busid(busid_hex: str | None) -> str | None:
    """NCCL's compact bus id (``%lx`` of the int64 it packs ``domain:bus:dev.fn`` into, e.g.
    ``60`` for 0000:00:06.0, ``2000`` for 0000:02:00.0) -> ``0000:00:06`` (the
    :func:`normalise_pci` form). Returns None when the text is not hexadecimal."""
    if not busid_hex:
        return None
    try:
        value = int(busid_hex, 16)
    except ValueError:
        return None
    if value < 0:
        return None
    return f"{value >> 20:04x}:{(value >> 12) & 0xFF:02x}:{(value >> 4) & 0xFF:02x}"


# --------------------------------------------------------------------------- addresses

_PORT_SUFFIX = re.compile(r"<\d+>$")


def parse_address(text: str | None) -> str | None:
    """The IP address in a peer string as NCCL and the sockets layer print it, normalised.

    ``10.0.0.15<38560>`` (NCCL's ``ip<port>``), ``10.0.0.15:38560``, ``[fe80::1]:5000``, a bare
    address, and IPv4-mapped IPv6 (``::ffff:10.0.0.15``, the form a RoCE v2 GID of an IPv4
    interface takes) -> ``"10.0.0.15"`` / ``"fe80::1"`` (IPv6 in RFC 5952 text: lower-case,
    compressed). Returns None when no address is recognised (a host name, ``10.0.0.x``
    placeholders)."""
    if not text:
        return None
    text = _PORT_SUFFIX.sub("", text.strip())
    if text.startswith("["):
        text = text[1:].split("]", 1)[0]
    elif text.count(":") == 1:
        text = text.split(":", 1)[0]
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return str(addr.ipv4_mapped)
    return str(addr)


_ANGLE_PORT = re.compile(r"^(?P<addr>.+)<(?P<port>\d+)>$")
_BRACKET_PORT = re.compile(r"^\[(?P<addr>[^\]]+)\]:(?P<port>\d+)$")


def normalise_peer(text: str | None) -> str | None:
    """A peer as printed -> ``addr:port`` (or the host name unchanged): the form of
    ``Event.peer``.

    NCCL prints ``10.0.0.15<38560>``; gloo prints ``[127.0.0.1]:11692``. IPv6 addresses keep
    their brackets (``[fe80::1]:5000``). Trailing punctuation is dropped. Returns None for
    None or empty text; other text is returned stripped (a peer may be a host name). The
    host behind a peer is found with :func:`parse_address`."""
    if not text:
        return None
    t = text.strip().rstrip(".,;")
    m = _ANGLE_PORT.match(t)
    if m:
        addr = m["addr"]
        return f"[{addr}]:{m['port']}" if ":" in addr and not addr.startswith("[") else f"{addr}:{m['port']}"
    m = _BRACKET_PORT.match(t)
    if m and ":" not in m["addr"]:
        return f"{m['addr']}:{m['port']}"
    return t


# --------------------------------------------------------------------------- GIDs

# ibv_devinfo -v / show_gids / sysfs ports/<n>/gids/<i> print a GID as 8 groups of 4 hex digits
# (fe80:0000:0000:0000:b8ce:f603:00a1:b2c3); NCCL and OpenSM print inet_ntop's compressed text
# (fe80::b8ce:f603:a1:b2c3, ::ffff:10.0.0.15).


def normalise_gid(text: str | None) -> str | None:
    """A RoCE / InfiniBand GID (128 bits) -> RFC 5952 IPv6 text, lower-case and compressed:
    ``fe80:0000:0000:0000:B8CE:F603:00A1:B2C3`` -> ``fe80::b8ce:f603:a1:b2c3``. An IPv4-mapped
    GID (RoCE v2 on an IPv4 interface) stays in its GID form ``::ffff:10.0.0.15``; the host
    address it stands for is :func:`parse_address` of it (``10.0.0.15``). Returns None for
    text that is not a GID (an IPv4 address is not one)."""
    if not text:
        return None
    try:
        gid = ipaddress.IPv6Address(text.strip())
    except ValueError:
        return None
    if gid.ipv4_mapped is not None:
        return f"::ffff:{gid.ipv4_mapped}"
    return str(gid)


# --------------------------------------------------------------------------- GUIDs

_GUID_TEXT = re.compile(r"(?:0x)?[0-9a-fA-F]{1,16}")


def parse_guid(text: str) -> int:
    """A node or port GUID as the IB tools print it (``0x7cfe900300a5a2a0``,
    ``c42a10300b1e2f1``: ibnetdiscover prints port GUIDs unpadded and without ``0x``,
    ``0C42A10300B1E2F1``) -> its 64-bit value. Raises ValueError naming the text for anything
    but 1-16 hex digits with an optional ``0x``."""
    t = text.strip()
    if not _GUID_TEXT.fullmatch(t):
        raise ValueError(f"{text!r} is not a GUID (1-16 hex digits, optional 0x)")
    return int(t.removeprefix("0x"), 16)


def format_guid(guid: int) -> str:
    """A 64-bit GUID value as ``0x`` + 16 lower-case hex digits."""
    return f"0x{guid:016x}"


def normalise_guid(text: str) -> str:
    """A GUID in any printed form -> ``0x`` + 16 lower-case hex digits
    (``c42a10300b1e2f1`` -> ``0x0c42a10300b1e2f1``). Raises ValueError as :func:`parse_guid`."""
    return format_guid(parse_guid(text))


# --------------------------------------------------------------------------- switch ports

_ONYX_IB = re.compile(r"^(?:IB|ib)(?:\s*port)?\s*(?P<slot>\d+)/(?P<port>\d+(?:/\d+)?)$")


def normalise_switch_port(text: str) -> str:
    """A switch port as a switch log names it -> the id topology ``switch_port`` uses.

    InfiniBand ports become their IB port number, as ibnetdiscover / ibqueryerrors / UFM name
    them: Onyx ``IB1/17`` and ``ib port 1/17`` -> ``17`` (slot 1, the only slot of a 1U switch; a
    split port ``IB1/17/2`` -> ``17/2``; another slot of a modular switch keeps ``<slot>/<port>``,
    ``IB3/17`` -> ``3/17``). A bare number stays as is. Ethernet names are kept exactly as the
    switch prints them (``Eth1/12``, ``swp12``, ``Ethernet48``): topology.yaml and lldpctl use
    the same names. Surrounding blanks and trailing ``.,:;`` are dropped; nothing raises."""
    t = text.strip().rstrip(".,:;")
    m = _ONYX_IB.match(t)
    if m:
        return m["port"] if m["slot"] == "1" else f"{m['slot']}/{m['port']}"
    return t
