"""The one command-line frame of every ``faultstream connect <name>``: shared options, settings,
the run loop, errors.

A connector **declares** its own options and how to build its :class:`connectors.source.Source`;
this module adds the options every connector shares, builds the process's one settings object
(:class:`Shared`), runs the source with :func:`connectors.runner.run` and turns errors into one
line on stderr (exit 2)::

    @connector(interval=10.0, cursor=".state/cursors/slurm-{cluster}.json", errors=(SlurmError,))
    def connect_slurm_cli(opts: Shared, cluster: Annotated[str, typer.Argument(help=...)]) -> Source:
        \"\"\"Publish Slurm job/step state transitions ...\"\"\"
        return SlurmConnector(cluster, cursor=opts.cursor_store(), poll_s=opts.interval_s)

The shared options, the same spelling, type, default and meaning on every connector
(``tests/connectors/test_command.py`` walks the command tree and checks it):

==================  =========================================================================
``--follow/--once`` ``-f``. ``--follow``: keep polling every ``--interval`` seconds until
                    Ctrl-C or SIGTERM; a failed poll or delivery is logged and retried with
                    the same record ids. ``--once`` (the default): one pass over what is
                    available now, then exit; any error exits 2 with one line on stderr and
                    the cursor left where it was.
``--interval S``    seconds between polls with ``--follow`` (default: the connector's).
``--cursor FILE``   where the source's position is saved after each delivered batch (default:
                    the connector's, under ``.state/cursors/``).
``--bootstrap``     Kafka bootstrap servers ``host:port[,...]`` (default:
                    ``KAFKA_BOOTSTRAP_SERVERS``; the other ``KAFKA_*`` variables give security,
                    :mod:`transport.kafka_settings`).
``--topic``         the topic to publish to (default: the connector's topic of the catalogue,
                    ``FAULTSTREAM_TOPIC_PREFIX`` applied).
==================  =========================================================================

A connector that reads a fixed input once (a bundle, certification result files, topology
files) declares ``interval=None``: ``--follow`` and ``--interval`` are refused with a clear
error; one with no position (``cursor=False``) refuses ``--cursor``.

The build function is called with :class:`Shared` first and the connector's own options as
keywords. It returns the source, or ``None`` when it already did its work (``topology --print``);
or it is a generator that yields the source and receives a :class:`Done` (records sent, the
producer, still open) to report or publish a last word (its own summary lines; then the frame
prints none).
"""

from __future__ import annotations

import functools
import inspect
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Callable, Generator, Optional

import typer

from connectors.cursor import CursorError, CursorStore
from connectors.registry import cli_fail
from connectors.runner import RoutedProducer, run, stop_on_signals

if TYPE_CHECKING:  # pragma: no cover
    from transport.kafka import RecordProducer
    from transport.kafka_settings import KafkaSettings

__all__ = ["SHARED_OPTIONS", "Shared", "Done", "connector", "input_files"]

#: the parameter names the frame adds to every connector command (its own options may not use them)
SHARED_OPTIONS = ("follow", "interval", "cursor", "bootstrap", "topic", "timeout")

FOLLOW_HELP = ("--follow: keep polling every --interval seconds until Ctrl-C or SIGTERM, retrying a failed poll "
               "or delivery; --once: one pass over what is available now, then exit (an error exits 2)")
INTERVAL_HELP = "seconds between polls with --follow"
CURSOR_HELP = "cursor file: the source's position, saved after each delivered batch"
BOOTSTRAP_HELP = "Kafka bootstrap servers host:port[,...] (default: KAFKA_BOOTSTRAP_SERVERS)"
TOPIC_HELP = "topic to publish to"
TIMEOUT_HELP = ("seconds a Kafka broker has to answer before a one-shot run (--once) reads anything; none "
                "answering exits 2 (--follow keeps retrying)")

#: Default of --timeout (seconds).
TIMEOUT_S = 10.0


@dataclass
class Shared:
    """The one settings object of a connector process, built by the frame from the shared
    options and the ``KAFKA_*`` environment.

    ``follow``: keep polling; ``interval_s``: seconds between polls (None for a source read
    once); ``cursor``: the cursor file (None: the source keeps no position); ``topic``: the
    topic records go to (a build function may change it, e.g. a bridge's output topic);
    ``routes``: record class -> topic for records that go elsewhere (dead letters), confirmed
    by the same flush; ``bootstrap``: the ``--bootstrap`` value (None: the environment's);
    ``timeout_s``: with ``--once``, seconds a broker has to answer before the run starts;
    ``through``: None, or a function given the Kafka producer (dead letters already routed)
    that returns what the records are sent through instead (``send``/``flush`` like
    :class:`transport.kafka.RecordProducer`; e.g. a gRPC client that keeps dead letters on
    Kafka), set by a build function whose records leave by another interface."""

    follow: bool
    interval_s: float | None
    cursor: Path | None
    topic: str
    bootstrap: str | None = None
    timeout_s: float = TIMEOUT_S
    routes: dict[type, str] = field(default_factory=dict)
    through: Callable[[Any], Any] | None = None
    _kafka: "KafkaSettings | None" = field(default=None, repr=False)

    @property
    def kafka(self) -> "KafkaSettings":
        """The Kafka client settings (:func:`transport.kafka_settings.kafka_settings`), read once,
        on first use, so a command that never connects never needs them. Invalid settings exit 2."""
        if self._kafka is None:
            from transport.kafka_settings import KafkaSettingsError, kafka_settings

            try:
                self._kafka = kafka_settings(self.bootstrap)
            except KafkaSettingsError as exc:
                cli_fail(str(exc))
        return self._kafka

    def cursor_store(self) -> CursorStore | None:
        """A :class:`connectors.cursor.CursorStore` on :attr:`cursor` (None without one)."""
        return CursorStore(self.cursor) if self.cursor is not None else None

    def producer(self, topic: str | None = None, **kwargs: Any) -> "RecordProducer":
        """A :class:`transport.kafka.RecordProducer` for ``topic`` (default :attr:`topic`) with
        :attr:`kafka`; ``kwargs`` go to it."""
        from transport.kafka import RecordProducer

        return RecordProducer(self.kafka, topic or self.topic, **kwargs)


@dataclass(frozen=True)
class Done:
    """What a generator build function receives after the run: ``sent`` records published and
    the ``producer`` (still open: a last publication is flushed with it)."""

    sent: int
    producer: Any


def input_files(paths: Sequence[Path], *, follow: bool) -> list[Path]:
    """``paths`` as given, checked as a connector's input files: a directory is refused, and
    so is a path that does not exist unless ``follow`` (tail -F waits for it to appear).

    Raises ValueError naming every refused path (the connector exits 2 with it)."""
    bad = [f"{p}: is a directory" for p in paths if p.is_dir()]
    if not follow:
        bad += [f"{p}: no such file" for p in paths if not p.exists()]
    if bad:
        raise ValueError("; ".join(bad))
    return list(paths)


def _shared_parameters(interval: float | str | None, cursor: str | None | bool, topic: str) -> list[inspect.Parameter]:
    if isinstance(interval, str):
        interval_default = f"--{interval.replace('_', '-')}"
    else:
        interval_default = f"{interval:g} s" if interval is not None else "not available: the input is read once"
    if cursor is False:
        cursor_default = "not available: the source keeps no position"
    else:
        cursor_default = (cursor.replace("{", "<").replace("}", ">") if isinstance(cursor, str)
                          else "none: no position is kept")
    kw = inspect.Parameter.KEYWORD_ONLY
    once, stateless = interval is None, cursor is False  # options that do not apply are taken but not listed
    return [
        inspect.Parameter("follow", kw, default=False, annotation=Annotated[bool, typer.Option(
            "--follow/--once", "-f", help=FOLLOW_HELP, hidden=once)]),
        inspect.Parameter("interval", kw, default=None, annotation=Annotated[Optional[float], typer.Option(
            "--interval", min=0.01, help=f"{INTERVAL_HELP} (default: {interval_default})", hidden=once)]),
        inspect.Parameter("cursor", kw, default=None, annotation=Annotated[Optional[Path], typer.Option(
            "--cursor", help=f"{CURSOR_HELP} (default: {cursor_default})", hidden=stateless)]),
        inspect.Parameter("bootstrap", kw, default=None, annotation=Annotated[Optional[str], typer.Option(
            "--bootstrap", help=BOOTSTRAP_HELP)]),
        inspect.Parameter("topic", kw, default=None, annotation=Annotated[Optional[str], typer.Option(
            "--topic", help=f"{TOPIC_HELP} (default: the catalogue's {topic} topic, FAULTSTREAM_TOPIC_PREFIX applied)")]),
        inspect.Parameter("timeout", kw, default=TIMEOUT_S, annotation=Annotated[float, typer.Option(
            "--timeout", min=0.1, help=TIMEOUT_HELP)]),
    ]


def connector(*, interval: float | str | None, cursor: str | None | bool = False, topic: str = "observations",
              errors: tuple[type[BaseException], ...] = (), first_pass_strict: bool = False
              ) -> Callable[[Callable[..., Any]], Callable[..., None]]:
    """Declare a connector command: decorate its build function (first parameter: the
    :class:`Shared` settings; the rest: its own ``typer`` options and arguments; its docstring
    is the help).

    ``interval``: default seconds between polls with ``--follow``, the name of one of its own
    options that gives it (``"step"``), or None for a source read once (``--follow`` and
    ``--interval`` are then refused). ``cursor``: default cursor file, ``{option}`` placeholders
    filled from its own options; None: no default (a position is kept only with ``--cursor``);
    False: ``--cursor`` is refused. ``topic``: the catalogue's topic (:func:`schemas.topics.
    catalogue` key). ``errors``: the exceptions of the outside system that end the command with
    one line on stderr (exit 2); cursor, Kafka, ``OSError`` and ``ValueError`` always do.
    ``first_pass_strict``: with ``--follow`` the first pass still fails fast (a rejected query or
    token exits 2 rather than being retried forever); later failures are retried.

    Returns the typer command function (a plain function whose signature is the connector's
    own parameters followed by the shared options)."""

    def decorate(build: Callable[..., Any]) -> Callable[..., None]:
        own = [p.replace(annotation=eval(p.annotation, build.__globals__)) if isinstance(p.annotation, str) else p  # noqa: S307
               for p in list(inspect.signature(build).parameters.values())[1:]]
        clash = [p.name for p in own if p.name in SHARED_OPTIONS]
        if clash:
            raise TypeError(f"{build.__name__}: {clash} are shared options of every connector")

        @functools.wraps(build)
        def command(**kwargs: Any) -> None:
            shared = {name: kwargs.pop(name) for name in SHARED_OPTIONS}
            opts = _settings(shared, kwargs, interval=interval, cursor=cursor, topic=topic)
            _execute(build, opts, kwargs, errors=errors, first_pass_strict=first_pass_strict)

        del command.__wrapped__  # typer must read the signature below, not build's
        command.__signature__ = inspect.Signature(own + _shared_parameters(interval, cursor, topic))  # type: ignore[attr-defined]
        command.__annotations__ = {}
        command.declaration = {"interval": interval, "cursor": cursor, "topic": topic}  # type: ignore[attr-defined]
        return command

    return decorate


def _settings(shared: dict[str, Any], own: dict[str, Any], *, interval: float | str | None,
              cursor: str | None | bool, topic: str) -> Shared:
    """The :class:`Shared` settings from the shared options' values; misuse exits 2."""
    from schemas.topics import catalogue

    if interval is None and (shared["follow"] or shared["interval"] is not None):
        cli_fail("this connector reads its input once: --follow and --interval do not apply")
    if cursor is False and shared["cursor"] is not None:
        cli_fail("this connector keeps no position: --cursor does not apply")
    if isinstance(interval, str):
        interval_s = shared["interval"] if shared["interval"] is not None else own[interval]
    else:
        interval_s = shared["interval"] if shared["interval"] is not None else interval
    path = shared["cursor"]
    if path is None and isinstance(cursor, str):
        path = Path(cursor.format(**own))
    return Shared(follow=shared["follow"], interval_s=interval_s, cursor=path,
                  topic=shared["topic"] or catalogue()[topic].name, bootstrap=shared["bootstrap"],
                  timeout_s=shared["timeout"])


def _execute(build: Callable[..., Any], opts: Shared, own: dict[str, Any], *,
             errors: tuple[type[BaseException], ...], first_pass_strict: bool) -> None:
    """Build the source, run it through a producer, report; see :func:`connector`."""
    from transport.kafka import KafkaProducerError

    fatal = (*errors, CursorError, KafkaProducerError, OSError, ValueError)
    steps: Generator[Any, Done, None] | None = None
    try:
        made = build(opts, **own)
        if inspect.isgenerator(made):
            steps, made = made, next(made)
    except StopIteration:
        return
    except fatal as exc:
        cli_fail(str(exc))
    if made is None:
        return
    source = made
    sent = 0
    producer = None
    try:
        with opts.producer() as producer, stop_on_signals() as stop:
            if hasattr(source, "stop"):
                source.stop = stop  # a source that waits (paced) ends its wait when the run stops
            if not opts.follow:
                producer.wait_for_broker(opts.timeout_s)
            target = RoutedProducer(producer, opts.routes) if opts.routes else producer
            if opts.through is not None:
                target = opts.through(target)
            pace = getattr(source, "wait_s", None)
            common = dict(topic=opts.topic, cursor=getattr(source, "cursor", None), stop=stop,
                          poll_s=pace if pace is not None else (opts.interval_s or 1.0))
            # a signal while waiting for the broker: nothing is sent
            if opts.follow and first_pass_strict and not stop.is_set():
                sent = run(source, target, **common)
            if opts.follow and not stop.is_set():
                sent += run(source, target, follow=True, retry=True, **common)
            elif not opts.follow and not stop.is_set():
                sent = run(source, target, **common)
            exit_code = None
            if steps is not None:
                try:
                    steps.send(Done(sent, target))
                except StopIteration:
                    pass
                except typer.Exit as exc:
                    exit_code = exc.exit_code
            if stop.signum == signal.SIGINT and not opts.follow:
                # Ctrl-C on a one-shot run stopped it between two cycles: reported as below
                raise KeyboardInterrupt
            if exit_code is not None:
                raise typer.Exit(exit_code)
    except KeyboardInterrupt:
        delivered = producer.delivered if producer is not None else sent
        typer.echo(f"interrupted after {delivered} records delivered", err=True)
        raise typer.Exit(130) from None
    except fatal as exc:
        cli_fail(str(exc))
    finally:
        close = getattr(source, "close", None)
        if callable(close):
            close()
    if steps is None:
        typer.echo(f"published {sent} records to {opts.topic}", err=True)
