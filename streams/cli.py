"""The ``faultstream`` command line (typer).

Commands:

* ``faultstream replay BUNDLE [--json] [--clickhouse URL | --no-store]`` -- the verdict of one
  incident bundle, for a person (rich) or as JSON Lines of Attributions; events, evidence
  observations and the verdict are written to ClickHouse (embedded chDB under
  ``.state/clickhouse`` by default, or any ``http(s)://`` server).
* ``faultstream score DIR...`` -- replay every bundle with an ``expected.yaml`` below the given
  directories and print hits and misses; exits 1 on any miss.
* ``faultstream schemas export DIR`` -- write the JSON Schema files of every record and the
  AsyncAPI document of the public topics.
* ``faultstream topics create|list`` -- the topic catalogue (``schemas/topics.py``).
* ``faultstream worker`` -- a stream worker (``streams/app.py``), until stopped.
* ``faultstream connect bundle|files|slurm|topology|counters|certifications`` -- publish
  inputs to Kafka (connectors from the ``faultstream.connectors`` entry points).
* ``faultstream verdicts`` -- print the verdicts on the attributions topic.
* ``faultstream rules suggest BUNDLE... [--min-count N]`` -- a YAML rule skeleton for each
  template of error lines no rule knows (``correlators/unrecognised.py``).

User errors (a bad bundle, an unreachable ClickHouse) print one line on stderr and exit 2;
no traceback.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn

from connectors.bundle import BundleError
from schemas.records import canonical_json

DEFAULT_CLICKHOUSE = "chdb://.state/clickhouse"

app = typer.Typer(
    help="faultstream: root-cause attribution for GPU cluster failures.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
schemas_app = typer.Typer(help="JSON Schema files of faultstream's records.", no_args_is_help=True)
app.add_typer(schemas_app, name="schemas")
rules_app = typer.Typer(help="The extraction rule pack and the lines it does not know.", no_args_is_help=True)
app.add_typer(rules_app, name="rules")

err = Console(stderr=True)
# clickhouse-connect logs every failed HTTP attempt at ERROR; the sink retries and reports
# one clear error itself
logging.getLogger("clickhouse_connect").setLevel(logging.CRITICAL)


def _fail(message: str, code: int = 2) -> None:
    # one line, never wrapped or styled, so it can be grepped when stderr is a file
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _replay(bundle: Path, *, show_progress: bool):
    from streams.replay import replay_bundle

    if not show_progress:
        return replay_bundle(bundle)
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), console=err, transient=True) as bar:
        task = bar.add_task(f"reading {bundle}", total=None)
        count = 0

        def tick(_obs) -> None:
            nonlocal count
            count += 1
            if count % 1000 == 0:
                bar.update(task, description=f"reading {bundle}: {count:,} records with candidate lines")

        return replay_bundle(bundle, on_observation=tick)


@app.command()
def replay(
    bundle: Path = typer.Argument(..., help="incident bundle directory (BUNDLE.md v1)"),
    json_lines: bool = typer.Option(False, "--json", help="print JSON Lines of Attributions"),
    clickhouse: str = typer.Option(
        DEFAULT_CLICKHOUSE, "--clickhouse", envvar="FAULTSTREAM_CLICKHOUSE", help="chdb://DIR or http(s)://host:8123"
    ),
    no_store: bool = typer.Option(False, "--no-store", help="do not write to ClickHouse"),
) -> None:
    """Replay an incident bundle and print its verdict."""
    try:
        result = _replay(bundle, show_progress=not json_lines and err.is_terminal)
    except BundleError as exc:
        _fail(str(exc))
    stored = None
    if not no_store:
        from sinks.clickhouse import ClickHouseSink, SinkError

        try:
            sink = ClickHouseSink(clickhouse)
            sink.write_observations(result.observations)
            sink.write_events(result.events)
            sink.write_attributions(result.attributions)
            sink.close()
            stored = clickhouse
        except SinkError as exc:
            _fail(f"ClickHouse: {exc}")
    if json_lines:
        sys.stdout.write("".join(canonical_json(att) + "\n" for att in result.attributions))
        return
    from streams.render import render_attribution

    out = Console() if Console().is_terminal else Console(width=140)
    for att in result.attributions:
        render_attribution(att, out)
    out.print(
        f"[dim]{result.lines_read:,} lines read, {len(result.events):,} events"
        + (f", stored in {stored}" if stored else "")
        + "[/]"
    )


@app.command()
def score(dirs: list[Path] = typer.Argument(..., help="directories holding bundles")) -> None:
    """Replay every bundle that has an expected.yaml; exit 1 on any miss.

    A bundle that cannot be replayed, or whose expected.yaml is invalid, is a miss naming it."""
    from streams.render import render_score_table
    from streams.replay import ScoreRow, replay_bundle, score as score_one

    bundles = sorted({p.parent for d in dirs for p in Path(d).rglob("expected.yaml")})
    if not bundles:
        _fail(f"no bundle with an expected.yaml under {', '.join(map(str, dirs))}")
    rows = []
    for bundle in bundles:
        try:
            result = replay_bundle(bundle)
        except BundleError as exc:
            rows.append(ScoreRow(bundle.name, "?", "not replayed", (f"{bundle}: {exc}",)))
            continue
        if result.expected is None:
            rows.append(ScoreRow(bundle.name, "?", result.attribution.root_cause.code, (f"{bundle}: {result.expected_error}",)))
            continue
        rows.append(score_one(result.attribution, result.expected, bundle.name, result.attributions))
    render_score_table(rows, Console())
    if not all(r.hit for r in rows):
        raise typer.Exit(1)


@app.command()
def worker(
    app_id: Optional[str] = typer.Option(None, help="consumer group / Faust app id [FAULTSTREAM_APP_ID]"),
    clickhouse: Optional[str] = typer.Option(None, help="chdb://DIR or http(s)://... [FAULTSTREAM_CLICKHOUSE]"),
    idle_timeout: Optional[float] = typer.Option(None, help="live mode: close idle windows after S seconds (0: never)"),
    lateness: Optional[float] = typer.Option(None, help="allowed lateness of events (s)"),
    web_port: Optional[int] = typer.Option(None, help="port of /metrics on 127.0.0.1"),
    loglevel: str = typer.Option("info", help="worker log level"),
    log_format: str = typer.Option("text", "--log-format", help="text | json (one JSON object per line: streams/logs.py)"),
) -> None:
    """Run a stream worker (Faust): observations -> events -> verdicts, until stopped.

    Settings come from FAULTSTREAM_* and KAFKA_* variables (see streams/settings.py and
    sinks/kafka_settings.py); the options here override them."""
    import faust

    from streams.app import create_app
    from streams.logs import configure_logging, logging_config
    from streams.settings import WorkerSettings

    try:  # before anything logs; faust.Worker re-applies it (mode clears the root handlers)
        configure_logging(log_format, loglevel)
    except ValueError as exc:
        _fail(str(exc))

    overrides = {
        "app_id": app_id, "clickhouse": clickhouse, "idle_timeout_s": idle_timeout,
        "allowed_lateness_s": lateness, "web_port": web_port,
    }
    from confluent_kafka import KafkaException

    from sinks.kafka_settings import KafkaSettings
    from streams.app import declare_topics

    try:
        settings = WorkerSettings(**{k: v for k, v in overrides.items() if v is not None})
        kafka = KafkaSettings()
    except ValueError as exc:  # pydantic.ValidationError is a ValueError
        _fail(f"worker settings: {exc}")
    logging.getLogger("faultstream.worker").info(
        "worker starting", extra={"app_id": settings.app_id, "bootstrap": kafka.bootstrap_servers})
    try:
        faust_app = create_app(settings, kafka)
    except ValueError as exc:  # invalid remediation / executor settings (pydantic)
        _fail(f"worker settings: {exc}")
    try:
        declare_topics(settings, kafka)
    except (KafkaException, RuntimeError) as exc:
        _fail(f"Kafka at {kafka.bootstrap_servers}: {exc}")
    json_config = logging_config(log_format, loglevel) if log_format == "json" else None  # text: Faust's own
    faust.Worker(faust_app, loglevel=loglevel, logging_config=json_config).execute_from_commandline()


@app.command()
def verdicts(
    follow: bool = typer.Option(False, "--follow", help="keep waiting for new verdicts"),
    json_lines: bool = typer.Option(False, "--json", help="print JSON Lines instead of the rich view"),
    workload: Optional[str] = typer.Option(None, help="only this workload (scope id)"),
    topic: Optional[str] = typer.Option(None, help="default: <FAULTSTREAM_TOPIC_PREFIX>.attributions"),
    timeout: float = typer.Option(5.0, help="without --follow: stop after this many idle seconds"),
) -> None:
    """Print the verdicts on the attributions topic (every revision, in topic order)."""
    import uuid

    from confluent_kafka import Consumer, KafkaException

    from sinks.kafka_settings import KafkaSettings
    from streams.render import render_attribution
    from streams.settings import WorkerSettings
    from schemas.records import Attribution

    kafka = KafkaSettings()
    name = topic or WorkerSettings().topic("attributions")
    consumer = Consumer(kafka.confluent_config() | {
        "group.id": f"faultstream-verdicts-{uuid.uuid4().hex}",
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
    })
    out = Console() if Console().is_terminal else Console(width=140)
    try:
        consumer.subscribe([name])
        import time as _time

        idle_since = _time.monotonic()
        while follow or _time.monotonic() - idle_since < timeout:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            idle_since = _time.monotonic()
            att = Attribution.model_validate_json(msg.value())
            if workload and att.scope.id != workload:
                continue
            if json_lines:
                sys.stdout.write(canonical_json(att) + "\n")
                sys.stdout.flush()
            else:
                render_attribution(att, out, max_timeline=15)
    except KafkaException as exc:
        _fail(f"Kafka at {kafka.bootstrap_servers}: {exc}")
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()


@schemas_app.command("export")
def schemas_export(out_dir: Path = typer.Argument(Path("schemas/json"), help="output directory")) -> None:
    """Write one JSON Schema file per record type."""
    from schemas.export import export_json_schemas

    for path in export_json_schemas(out_dir):
        typer.echo(str(path))


@rules_app.command("suggest")
def rules_suggest(
    bundles: list[Path] = typer.Argument(..., help="incident bundle directories"),
    min_count: int = typer.Option(1, "--min-count", min=1, help="only templates with at least N lines"),
) -> None:
    """Print a YAML rule skeleton (template, keywords, pattern, example line) for each
    template of error-severity lines that no rule knows, most frequent first. Fill in its
    source, event type and fields, then load it with the pack (correlators/rules/)."""
    from correlators.unrecognised import EVENT_TYPE, mine_templates, suggest_rules
    from streams.replay import replay_bundle

    unknown = []
    for bundle in bundles:
        try:
            result = replay_bundle(bundle)
        except BundleError as exc:
            _fail(str(exc))
        unknown.extend(e for e in result.events if e.type == EVENT_TYPE)
    typer.echo(suggest_rules(mine_templates(unknown), min_count=min_count), nl=False)


def main() -> None:  # pragma: no cover - console entry
    app()



# -- connect: publishers to Kafka, one command per registered connector (connectors/registry.py)
from connectors.registry import add_connect_commands  # noqa: E402

connect_app = typer.Typer(help="Publish inputs (bundles, log files, ...) to Kafka.", no_args_is_help=True)
app.add_typer(add_connect_commands(connect_app), name="connect")


from streams.remediation_cli import app as remediation_app  # noqa: E402

app.add_typer(remediation_app, name="remediation")


# -- topics: the topic catalogue (schemas/topics.py) on a broker -------------------------------
topics_app = typer.Typer(help="Kafka topics of the catalogue (schemas/topics.py).", no_args_is_help=True)
app.add_typer(topics_app, name="topics")


def _topics_settings(bootstrap: str | None):
    """KafkaSettings from the environment, with ``--bootstrap`` overriding the servers."""
    from pydantic import ValidationError

    from sinks.kafka_settings import KafkaSettings

    try:
        return KafkaSettings(bootstrap_servers=bootstrap) if bootstrap else KafkaSettings()
    except ValidationError as exc:
        _fail(f"invalid Kafka settings: {exc.errors()[0]['msg']}")


@topics_app.command("create")
def topics_create(
    bootstrap: str = typer.Option(None, "--bootstrap", help="host:port[,...] (default: KAFKA_BOOTSTRAP_SERVERS)"),
    partitions: int = typer.Option(None, "--partitions", min=1, help="override every topic's partition count"),
    prefix: str = typer.Option(None, "--prefix", help="topic name prefix (default: FAULTSTREAM_TOPIC_PREFIX or faultstream)"),
    timeout: float = typer.Option(30.0, "--timeout", help="seconds per admin request"),
) -> None:
    """Create the catalogue's topics that do not exist yet (idempotent); exit 1 when an existing
    topic's partitions or cleanup policy differ, 2 when the broker cannot be reached."""
    from confluent_kafka import KafkaException

    from schemas.topics import TopicMismatchError, catalogue, create_topics

    settings = _topics_settings(bootstrap)
    specs = catalogue(prefix)
    try:
        config = dict(settings.confluent_config(), log_level=0)  # errors are reported below, once
        created = create_topics(config, specs, partitions_override=partitions, timeout_s=timeout)
    except TopicMismatchError as exc:
        for name in exc.created:
            typer.echo(f"created {name}")
        typer.echo(f"error: {exc}", err=True)  # plain: one line per topic, never wrapped
        raise typer.Exit(1)
    except (KafkaException, TimeoutError) as exc:
        detail = exc.args[0].str() if isinstance(exc, KafkaException) and exc.args else str(exc)
        _fail(f"Kafka at {settings.bootstrap_servers}: {detail}")
    for spec in specs.values():
        typer.echo(f"{'created' if spec.name in created else 'exists '} {spec.name}")


@topics_app.command("list")
def topics_list(
    prefix: str = typer.Option(None, "--prefix", help="topic name prefix (default: FAULTSTREAM_TOPIC_PREFIX or faultstream)"),
) -> None:
    """Print the catalogue: name, key, value schema, partitions, cleanup policy, retention."""
    from rich.table import Table

    from schemas.topics import catalogue

    table = Table("topic", "key", "value", "partitions", "cleanup", "retention")
    for spec in catalogue(prefix).values():
        retention = "-" if spec.retention_ms is None else f"{spec.retention_ms / 86_400_000:g} d"
        table.add_row(spec.name, spec.key, spec.value_schema or "-", str(spec.partitions), spec.cleanup_policy, retention)
    Console(width=160).print(table)


if __name__ == "__main__":  # pragma: no cover -- after every sub-app is registered
    app()
