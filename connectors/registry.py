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
from typer.core import TyperCommand, TyperGroup

if TYPE_CHECKING:  # pragma: no cover
    from transport.kafka import RecordProducer

__all__ = ["GROUP", "BUILTIN", "ConnectGroup", "connectors", "make_producer", "cli_fail"]

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


def _targets() -> dict[str, Callable[[], Callable[..., object]]]:
    """name -> loader of its command function: the built-ins, then the entry points of
    :data:`GROUP` (an entry point of a built-in's name replaces it)."""
    found: dict[str, Callable[[], Callable[..., object]]] = {
        name: (lambda target=target: _load(target)) for name, target in BUILTIN.items()}
    found.update({ep.name: ep.load for ep in entry_points(group=GROUP)})
    return found


def _loaded(name: str, load: Callable[[], Callable[..., object]]) -> Callable[..., object] | None:
    try:
        return load()
    except Exception as exc:  # noqa: BLE001 -- a third party's import error
        log.warning("connector %r cannot be loaded: %s", name, exc)
        return None


def connectors() -> dict[str, Callable[..., object]]:
    """name -> command function, for every entry point of :data:`GROUP` plus the built-ins,
    each module imported. A broken third-party entry point is logged (warning) and left out,
    never fatal."""
    loaded = {name: _loaded(name, load) for name, load in sorted(_targets().items())}
    return {name: fn for name, fn in loaded.items() if fn is not None}


class ConnectGroup(TyperGroup):
    """The ``connect`` command group: one command per connector of :func:`connectors`, each
    connector's module imported only when its command runs or the group's help lists it, so
    the other commands (``faultstream worker`` above all) load none of them."""

    def list_commands(self, ctx: typer.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(_targets()))

    def get_command(self, ctx: typer.Context, cmd_name: str) -> TyperCommand | TyperGroup | None:
        command = super().get_command(ctx, cmd_name)
        load = _targets().get(cmd_name) if command is None else None
        fn = _loaded(cmd_name, load) if load is not None else None
        if fn is None:
            return command
        # the group's help format; completion is installed by the top-level command only
        one = typer.Typer(rich_markup_mode=self.rich_markup_mode, add_completion=False)
        one.command(cmd_name)(fn)
        command = typer.main.get_command(one)
        self.add_command(command, cmd_name)
        return command


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
