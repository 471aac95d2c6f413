"""The registry of connectors behind ``faultstream connect <name>``.

Connectors are Python entry points in the group ``faultstream.connectors``: the name is the
sub-command, the object a typer command function (its parameters, annotated with
``typer.Argument``/``typer.Option``, are the sub-command's arguments; its docstring the help).
Third-party packages add theirs in their own ``pyproject.toml``::

    [project.entry-points."faultstream.connectors"]
    loki = "faultstream_loki:connect_loki_cli"

The built-in connectors are declared the same way in faultstream's ``pyproject.toml``; they are
also listed in :data:`BUILTIN` so a checkout whose installed metadata predates a connector
still offers it (an entry point of the same name wins).

Helpers for connector commands: :func:`make_producer` (a
:class:`transport.kafka.RecordProducer` from ``--bootstrap`` or the ``KAFKA_*`` environment,
:func:`transport.kafka_settings.kafka_settings`) and :func:`cli_fail` (one line on stderr, exit
code 2). A connector command builds its source and hands it to :func:`connectors.runner.run`.
"""

from __future__ import annotations

import logging
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Callable, NoReturn

import typer

if TYPE_CHECKING:  # pragma: no cover
    from transport.kafka import RecordProducer

__all__ = ["GROUP", "BUILTIN", "connectors", "add_connect_commands", "make_producer", "cli_fail"]

GROUP = "faultstream.connectors"

#: name -> "module:attribute" of the built-in connector commands.
BUILTIN: dict[str, str] = {
    "bundle": "connectors.publish:connect_bundle_cli",
    "certifications": "connectors.certifications:connect_certifications_cli",
    "counters": "connectors.counters:connect_counters_cli",
    "files": "connectors.files:connect_files_cli",
    "kubernetes": "connectors.kubernetes:connect_kubernetes_cli",
    "loki": "connectors.loki:connect_loki_cli",
    "nvml": "connectors.nvml:connect_nvml_cli",
    "nvsentinel": "connectors.nvsentinel:connect_nvsentinel_cli",
    "otlp": "connectors.otlp:connect_otlp_cli",
    "prometheus": "connectors.prometheus:connect_prometheus_cli",
    "slurm": "connectors.slurm:connect_slurm_cli",
    "topology": "connectors.topology:connect_topology_cli",
}

log = logging.getLogger(__name__)


def _load(target: str) -> Callable[..., object]:
    module, _, attr = target.partition(":")
    obj: object = __import__(module, fromlist=[attr])
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj  # type: ignore[return-value]


def connectors() -> dict[str, Callable[..., object]]:
    """name -> command function, for every entry point of :data:`GROUP` plus the built-ins.
    A broken third-party entry point is logged (warning) and left out, never fatal."""
    found: dict[str, Callable[..., object]] = {}
    names = dict(BUILTIN)
    eps = {ep.name: ep for ep in entry_points(group=GROUP)}
    for name in sorted(set(names) | set(eps)):
        try:
            found[name] = eps[name].load() if name in eps else _load(names[name])
        except Exception as exc:  # noqa: BLE001 -- a third party's import error
            log.warning("connector %r cannot be loaded: %s", name, exc)
    return found


def add_connect_commands(app: typer.Typer) -> typer.Typer:
    """Register every connector of :func:`connectors` as a command of ``app``; returns it."""
    for name, fn in connectors().items():
        app.command(name)(fn)
    return app


def cli_fail(message: str, code: int = 2) -> NoReturn:
    """Print ``error: <message>`` on stderr and exit with ``code`` (no traceback)."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def make_producer(bootstrap: str | None, topic: str, **kwargs) -> "RecordProducer":
    """A :class:`transport.kafka.RecordProducer` for ``topic`` (``kwargs`` go to it): Kafka
    settings of :func:`transport.kafka_settings.kafka_settings` (the ``KAFKA_*`` environment,
    ``bootstrap`` = ``host:port[,...]`` overriding the servers). Invalid settings exit through
    :func:`cli_fail`."""
    from transport.kafka import RecordProducer
    from transport.kafka_settings import KafkaSettingsError, kafka_settings

    try:
        settings = kafka_settings(bootstrap)
    except KafkaSettingsError as exc:
        cli_fail(str(exc))
    return RecordProducer(settings, topic, **kwargs)
