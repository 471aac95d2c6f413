"""The ``faultstream`` command line (typer).

Commands:

* ``faultstream replay BUNDLE [--format text|line|json] [--verbose] [--clickhouse URL | --no-store]``
  -- the verdicts of one incident bundle: for a person, each on one screen
  (:func:`streams.render.render_summary`; ``--verbose``: with the coverage table and every
  timeline row), one line each, or JSON Lines of Attributions; events, evidence
  observations and the verdict are written to ClickHouse (embedded chDB under
  ``.state/clickhouse`` by default, or any ``http(s)://`` server).
* ``faultstream replay --from-kafka|--from-clickhouse [--since T] [--until T] [--workload W]
  [--cluster C] [--diff]`` -- replay a Kafka range of the observations topic or the stored
  observations (``streams/sources.py``); ``--diff`` prints what changed against the stored
  verdicts and exits 1 when anything did.
* ``faultstream replay BUNDLE --html report.html`` -- also write the verdicts as one
  self-contained HTML page (``streams/report.py``; inline assets, opens offline).
* ``faultstream ui [--clickhouse URL] [--port N] [--allow-commands]`` -- the web incident
  explorer over the stored verdicts (``streams/ui``); read-only unless ``--allow-commands``.
* ``faultstream bundle export W --out DIR`` -- write a stored incident as a bundle
  (``streams/export.py``).
* ``faultstream score DIR...`` -- replay every bundle with an ``expected.yaml`` below the given
  directories and print hits and misses; exits 1 on any miss.
* ``faultstream schemas export DIR`` -- write the JSON Schema files of every record and the
  AsyncAPI document of the public topics.
* ``faultstream topics create|list`` -- the topic catalogue (``schemas/topics.py``).
* ``faultstream worker`` -- a stream worker (``streams/app.py``), until stopped.
* ``faultstream connect bundle|files|slurm|topology|counters|certifications`` -- publish
  inputs to Kafka (connectors from the ``faultstream.connectors`` entry points).
* ``faultstream verdicts [--follow] [--format text|line|json]`` -- print the verdicts on the
  attributions topic (``line``: one line per revision).
* ``faultstream rules suggest BUNDLE... [--min-count N]`` -- a YAML rule skeleton for each
  template of error lines no rule knows (``correlators/unrecognised.py``).

User errors (a bad bundle, an unreachable ClickHouse) print one line on stderr and exit 2;
no traceback. Option names, formats and widths follow ``streams/terminal.py``; help is click's
plain layout (paragraphs re-wrapped to the terminal, flags without a value placeholder);
``--install-completion`` / ``--show-completion`` set up shell completion.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn

from connectors.registry import cli_fail
from schemas.records import canonical_json
from streams.terminal import FORMAT_HELP, JSON_ALIAS, Format, chosen_format as _format, output_console

DEFAULT_CLICKHOUSE = "chdb://.state/clickhouse"

app = typer.Typer(
    help="faultstream: root-cause attribution for GPU cluster failures.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # plain click help: docstring paragraphs re-wrapped to the terminal, flags without a
    # placeholder, \b keeps a block as written
    rich_markup_mode=None,
)
schemas_app = typer.Typer(help="JSON Schema files of faultstream's records.", no_args_is_help=True)
app.add_typer(schemas_app, name="schemas")
rules_app = typer.Typer(help="The extraction rule pack and the lines it does not know.", no_args_is_help=True)
app.add_typer(rules_app, name="rules")

err = Console(stderr=True)

# clickhouse-connect logs every failed HTTP attempt at ERROR; the sink retries and reports
# one clear error itself
logging.getLogger("clickhouse_connect").setLevel(logging.CRITICAL)


def _engine_config(recipe: Path | None):
    """The engine configuration of a replay: the packaged rules, with the AICR recipe's stack
    versions as the drift baseline when ``recipe`` is given (exit 2 for a bad recipe)."""
    import dataclasses

    from correlators.config import EngineConfig

    config = EngineConfig.default()
    if recipe is None:
        return config
    from connectors.aicr import RecipeError, load_recipe

    try:
        return dataclasses.replace(config, baseline=load_recipe(recipe))
    except (RecipeError, OSError) as exc:
        cli_fail(f"--recipe {recipe}: {exc}")


def _replay(bundle: Path, *, show_progress: bool, config=None):
    from streams.replay import replay_bundle

    if not show_progress:
        return replay_bundle(bundle, config=config)
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), console=err, transient=True) as bar:
        task = bar.add_task(f"reading {bundle}", total=None)
        count = 0

        def tick(_obs) -> None:
            nonlocal count
            count += 1
            if count % 1000 == 0:
                bar.update(task, description=f"reading {bundle}: {count:,} records with candidate lines")

        return replay_bundle(bundle, on_observation=tick, config=config)


SourceOption = {
    "since": typer.Option(None, "--since", help="ISO 8601 start, UTC unless it has a zone (Kafka: message time; ClickHouse: event time)"),
    "until": typer.Option(None, "--until", help="ISO 8601 end (Kafka: exclusive; ClickHouse: inclusive)"),
    "workload": typer.Option(None, "--workload", help="the workload's records, its nodes' and switches' in its windows (streams/sources.py)"),
    "cluster": typer.Option(None, "--cluster", help="only this cluster"),
    "topic_prefix": typer.Option(None, "--topic-prefix", help="topic name prefix (default: FAULTSTREAM_TOPIC_PREFIX or faultstream)"),
    "bootstrap": typer.Option(None, "--bootstrap", help="Kafka host:port[,...] (default: KAFKA_BOOTSTRAP_SERVERS)"),
    "timeout": typer.Option(10.0, "--timeout", min=0.1, help="seconds to wait for the broker"),
    # the former name of --timeout, kept for scripts
    "kafka_timeout": typer.Option(None, "--kafka-timeout", min=0.1, hidden=True, help="the same as --timeout"),
}


#: ``topics --prefix``, the former name of --topic-prefix, kept for scripts.
TOPIC_PREFIX_ALIAS = typer.Option(None, "--prefix", hidden=True, help="the same as --topic-prefix")


def _read_source(config, *, from_kafka: bool, clickhouse: str, since: Optional[str], until: Optional[str],
                 workload: Optional[str], cluster: Optional[str], topic_prefix: Optional[str],
                 bootstrap: Optional[str], kafka_timeout: float, prefilter: bool = False):
    """(observations, plan, report) of a Kafka range or of ClickHouse (streams/sources.py);
    ``prefilter``: ClickHouse sends only the rows the pipeline would not skip (a replay);
    user errors end the command (exit 2)."""
    from sinks.clickhouse import ClickHouseSink, SinkError
    from streams import sources

    try:
        since_ns = sources.parse_time(since) if since else None
        until_ns = sources.parse_time(until) if until else None
    except ValueError as exc:
        cli_fail(str(exc))
    report = sources.ReadReport()
    try:
        if from_kafka:
            from schemas.topics import catalogue
            from transport.kafka_settings import KafkaSettingsError, kafka_settings

            try:
                settings = kafka_settings(bootstrap)
            except KafkaSettingsError as exc:
                cli_fail(str(exc))
            topic = catalogue(topic_prefix)["observations"].name
            read = list(sources.observations_from_kafka(settings.confluent_config(), topic, since_ns=since_ns,
                                                        until_ns=until_ns, timeout_s=kafka_timeout, report=report))
            observations, plan = sources.select(read, config, workload=workload, cluster=cluster, report=report)
            return observations, plan, report
        plans: list = []
        with ClickHouseSink(clickhouse) as sink:
            observations = list(sources.observations_from_clickhouse(
                sink, config, workload=workload, cluster=cluster, since_ns=since_ns, until_ns=until_ns,
                report=report, plan_out=plans, prefilter=prefilter))
        return observations, plans[0], report
    except sources.SourceError as exc:
        cli_fail(str(exc))
    except SinkError as exc:
        cli_fail(f"ClickHouse: {exc}")


def _print_diff(verdicts, clickhouse: str, json_lines: bool, workloads) -> None:
    """Compare ``verdicts`` with the stored ones and print the changes; exit 1 when any."""
    import json

    from sinks.clickhouse import ClickHouseSink, SinkError
    from streams.sources import ReadReport, diff_verdicts, stored_verdicts

    report = ReadReport()
    span = (min((a.window.start for a in verdicts), default=0), max((a.window.end for a in verdicts), default=0))
    try:
        with ClickHouseSink(clickhouse) as sink:
            stored = stored_verdicts(sink, verdicts, workloads=workloads,
                                     clusters={a.scope.cluster for a in verdicts}, span=span, report=report)
    except SinkError as exc:
        cli_fail(f"ClickHouse: {exc}")
    if report.invalid:
        typer.echo(f"stored verdicts: {report.summary()}", err=True)
    result = diff_verdicts(verdicts, stored)
    for change in result.changes:
        if json_lines:
            typer.echo(json.dumps({"attribution_id": change.attribution_id, "scope": change.scope,
                                   "status": change.status, "before": change.before, "after": change.after},
                                  sort_keys=True))
        elif change.status != "same":
            typer.echo("\n".join(change.lines()))
    typer.echo(result.summary(), err=json_lines)
    if result.differs:
        raise typer.Exit(1)


@app.command()
def replay(
    bundle: Optional[Path] = typer.Argument(None, help="incident bundle directory (BUNDLE.md v1)"),
    fmt: Format = typer.Option(Format.text, "--format", help=FORMAT_HELP),
    json_alias: bool = JSON_ALIAS,
    verbose: bool = typer.Option(False, "--verbose", "-v", help="text: also the coverage table and every timeline row"),
    clickhouse: str = typer.Option(
        DEFAULT_CLICKHOUSE, "--clickhouse", envvar="FAULTSTREAM_CLICKHOUSE", help="chdb://DIR or http(s)://host:8123"
    ),
    no_store: bool = typer.Option(False, "--no-store", help="do not write to ClickHouse"),
    from_kafka: bool = typer.Option(False, "--from-kafka", help="replay a time range of the observations topic"),
    from_clickhouse: bool = typer.Option(False, "--from-clickhouse", help="replay the observations stored in ClickHouse"),
    since: Optional[str] = SourceOption["since"],
    until: Optional[str] = SourceOption["until"],
    workload: Optional[str] = SourceOption["workload"],
    cluster: Optional[str] = SourceOption["cluster"],
    topic_prefix: Optional[str] = SourceOption["topic_prefix"],
    bootstrap: Optional[str] = SourceOption["bootstrap"],
    timeout: float = SourceOption["timeout"],
    kafka_timeout: Optional[float] = SourceOption["kafka_timeout"],
    diff: bool = typer.Option(False, "--diff", help="print what changed against the stored verdicts; exit 1 if anything did"),
    html: Optional[Path] = typer.Option(None, "--html", help="also write the verdicts as one self-contained HTML page (opens offline)"),
    recipe: Optional[Path] = typer.Option(None, "--recipe", help="AICR recipe YAML: the stack versions the nodes should run (drift is a cause)"),
) -> None:
    """Replay an incident bundle, a Kafka time range or stored observations, and print the
    verdicts.

    Each verdict fits a screen: cause, culprits, the main symptoms and the reasoning;
    --verbose adds the coverage of every input source and the whole evidence timeline. With
    --diff it prints what changed against the verdicts stored in ClickHouse (latest revision
    per attribution id; exit 0: nothing changed, 1: a verdict changed, is new or is gone).
    Only a bundle's replay is stored, and never with --diff."""
    fmt = _format(fmt, json_alias)
    json_lines = fmt is Format.json
    timeout = kafka_timeout if kafka_timeout is not None else timeout
    if sum([bundle is not None, from_kafka, from_clickhouse]) != 1:
        cli_fail("give exactly one source: a BUNDLE directory, --from-kafka or --from-clickhouse")
    if bundle is None and html is not None:
        cli_fail("--html writes the report of a BUNDLE replay")
    from connectors.bundle import BundleError

    config = _engine_config(recipe)
    if bundle is None:
        _replay_source(config, from_kafka=from_kafka, clickhouse=clickhouse, since=since, until=until,
                       workload=workload, cluster=cluster, topic_prefix=topic_prefix, bootstrap=bootstrap,
                       kafka_timeout=timeout, diff=diff, fmt=fmt, verbose=verbose)
        return
    if since or until or workload or cluster:
        cli_fail("--since, --until, --workload and --cluster select from --from-kafka or --from-clickhouse, not a bundle")
    try:
        result = _replay(bundle, show_progress=not json_lines and err.is_terminal, config=config)
    except BundleError as exc:
        cli_fail(str(exc))
    if html is not None:
        from streams.report import render_report

        try:
            html.write_text(render_report(result), encoding="utf-8")
        except OSError as exc:
            cli_fail(f"--html {html}: {exc.strerror or exc}")
        typer.echo(f"report: {html}", err=True)
    if diff:
        _print_diff(result.attributions, clickhouse, json_lines,
                    [a.scope.id for a in result.attributions if a.scope.kind == "workload"])
        return
    stored, store_error = (None, None) if no_store else _store_replay(result, clickhouse)
    if json_lines:
        sys.stdout.write("".join(canonical_json(att) + "\n" for att in result.attributions))
        if store_error:
            cli_fail(store_error)
        return
    out = _print_verdicts(result.attributions, fmt, verbose)
    if fmt is Format.text:
        out.print(
            f"[dim]{result.lines_read:,} lines read, {len(result.events):,} events extracted from them"
            + (f", stored in {stored}" if stored else "")
            + "[/]"
        )
    if store_error:
        cli_fail(store_error)


def _replay_source(config: Any, *, from_kafka: bool, clickhouse: str, diff: bool, fmt: Format,
                   verbose: bool, **selection: Any) -> None:
    """``replay --from-kafka | --from-clickhouse``: read the selected observations
    (:func:`_read_source`), replay them and print the verdicts (the asked workload's first) or
    their diff against the stored ones."""
    from streams.replay import replay_observations

    observations, plan, report = _read_source(config, from_kafka=from_kafka, clickhouse=clickhouse, prefilter=True,
                                              **selection)
    typer.echo(f"{'Kafka' if from_kafka else 'ClickHouse'}: {report.summary()}, {len(observations):,} selected",
               err=True)
    verdicts, _, _ = replay_observations(observations, config)
    # the asked workload's verdict first, the rest in replay order (sort is stable)
    verdicts.sort(key=lambda a: a.scope.kind != "workload" or a.scope.id != plan.focus)
    if diff:
        _print_diff(verdicts, clickhouse, fmt is Format.json, plan.workloads)
    else:
        _print_verdicts(verdicts, fmt, verbose)


def _store_replay(result: Any, clickhouse: str) -> tuple[str | None, str | None]:
    """Write a bundle replay's observations, events and verdicts to ClickHouse: (where they
    were stored, None) or (None, the error to exit with after the verdicts are printed)."""
    from sinks.clickhouse import ClickHouseSink, SinkError

    try:
        sink = ClickHouseSink(clickhouse)
        sink.write_observations(result.observations)
        sink.write_events(result.events)
        sink.write_attributions(result.attributions)
        sink.close()
        return clickhouse, None
    except SinkError as exc:
        message = str(exc).splitlines()[0][:300]
        held = any(word in str(exc) for word in ("cannot open the chDB engine", "one engine per process"))
        hint = ("an embedded store is held by one process at a time: use --no-store or another "
                "--clickhouse chdb://DIR" if held else "use --no-store to print the verdicts only")
        return None, f"ClickHouse: {message} -- the verdicts were not stored ({hint})"


def _print_verdicts(verdicts: list, fmt: Format = Format.text, verbose: bool = False,
                    out: Console | None = None) -> Console:
    """Print ``verdicts`` in ``fmt``: text fits each on a screen (``verbose``: the coverage
    table and every timeline row too), line gives one line each, json one JSON line each.
    Returns the console (:func:`output_console` unless ``out`` is given)."""
    from streams.render import render_attribution, render_summary, verdict_line

    out = out or output_console()
    for att in verdicts:
        if fmt is Format.json:
            sys.stdout.write(canonical_json(att) + "\n")
        elif fmt is Format.line:
            out.print(verdict_line(att), markup=False, highlight=False, soft_wrap=True)
        elif verbose:
            render_attribution(att, out, max_timeline=None)
        else:
            render_summary(att, out)
    sys.stdout.flush()
    return out


# -- bundle: incident bundles (BUNDLE.md) from stored observations -----------------------------
bundle_app = typer.Typer(help="Incident bundles (BUNDLE.md) from stored observations.", no_args_is_help=True)
app.add_typer(bundle_app, name="bundle")


@bundle_app.command("export")
def bundle_export(
    workload_id: str = typer.Argument(..., help="the workload to export (its workload record must be stored)"),
    out: Path = typer.Option(..., "--out", help="the bundle directory to write (new or empty)"),
    clickhouse: str = typer.Option(
        DEFAULT_CLICKHOUSE, "--clickhouse", envvar="FAULTSTREAM_CLICKHOUSE", help="chdb://DIR or http(s)://host:8123"
    ),
    from_kafka: bool = typer.Option(False, "--from-kafka", help="read a time range of the observations topic instead"),
    since: Optional[str] = SourceOption["since"],
    until: Optional[str] = SourceOption["until"],
    cluster: Optional[str] = SourceOption["cluster"],
    topic_prefix: Optional[str] = SourceOption["topic_prefix"],
    bootstrap: Optional[str] = SourceOption["bootstrap"],
    timeout: float = SourceOption["timeout"],
    kafka_timeout: Optional[float] = SourceOption["kafka_timeout"],
) -> None:
    """Write a stored incident as a bundle: the observations `replay --workload` selects
    (from ClickHouse, or from a Kafka range), rebuilt into workload.yaml, workloads/*.yaml,
    topology.yaml and logs/<host>/<file> (streams/export.py says what cannot round-trip)."""
    from correlators.config import EngineConfig
    from streams.export import ExportError, export_bundle

    observations, _, report = _read_source(
        EngineConfig.default(), from_kafka=from_kafka, clickhouse=clickhouse, since=since, until=until,
        workload=workload_id, cluster=cluster, topic_prefix=topic_prefix, bootstrap=bootstrap,
        kafka_timeout=kafka_timeout if kafka_timeout is not None else timeout)
    try:
        written = export_bundle(observations, workload_id, out)
    except ExportError as exc:
        cli_fail(str(exc))
    skipped = ", ".join(f"{n} {kind}" for kind, n in sorted(written.skipped.items()))
    typer.echo(f"{report.summary()}; wrote {len(written.files)} files, {written.records:,} records to {out}"
               + (f" (not written: {skipped})" if skipped else "")
               + (f" ({written.overlaps} overlapping records left out)" if written.overlaps else ""), err=True)


def _bundles_under(root: Path) -> list[Path]:
    """The directories under ``root`` (itself included) that hold an ``expected.yaml``,
    following symbolic links to directories (each real directory once)."""
    import os

    found, seen = [], set()
    for here, subdirs, files in os.walk(root, followlinks=True):
        real = os.path.realpath(here)
        if real in seen:
            subdirs[:] = []
            continue
        seen.add(real)
        subdirs.sort()
        if "expected.yaml" in files:
            found.append(Path(here))
    return found


@app.command()
def score(
    dirs: list[Path] = typer.Argument(..., help="directories holding bundles"),
    calibration: bool = typer.Option(False, "--calibration",
                                     help="also print each quality level's count and hit rate"),
) -> None:
    """Replay every bundle that has an expected.yaml; exit 1 on any miss.

    A bundle that cannot be replayed, or whose expected.yaml is invalid, is a miss naming it.
    `--calibration` adds, per quality level, how many verdicts have it and how many of them
    are right in everything but their quality, against the level's promise (definitive >= 98 %,
    probable >= 80 %)."""
    from connectors.bundle import BundleError
    from streams.render import render_calibration, render_score_table
    from streams.replay import ScoreRow, calibration as calibrate, replay_bundle, score as score_one

    missing = [str(d) for d in dirs if not Path(d).is_dir()]
    if missing:
        cli_fail(f"no such directory: {', '.join(missing)}")
    bundles = sorted({b for d in dirs for b in _bundles_under(Path(d))})
    if not bundles:
        cli_fail(f"no bundle with an expected.yaml under {', '.join(map(str, dirs))}")
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
    if calibration:
        render_calibration(calibrate(rows), Console())
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
    stage: str = typer.Option("all", help="all: the whole worker (the batch ingest stage as a child process "
                                          "beside the Faust agents); ingest: the batch ingest stage alone "
                                          "(observations -> events, streams/ingest.py); correlate: the worker "
                                          "without its ingest (windows, fabric, remediation, sinks)"),
    batch_size: int = typer.Option(2000, "--batch-size", min=1,
                                   help="most observations per batch of the ingest stage (all, ingest)"),
    parent_pid: Optional[int] = typer.Option(None, "--parent-pid", hidden=True,
                                             help="--stage ingest: stop when this process ends (the worker's child)"),
) -> None:
    """Run a stream worker: observations -> events -> verdicts, until stopped.

    Settings come from FAULTSTREAM_* and KAFKA_* variables (see streams/settings.py and
    transport/kafka_settings.py); the options here override them. `--stage ingest` and
    `--stage correlate` split the worker in two processes that scale apart (one consumer
    group each; start as many of each as the partitions allow)."""
    if stage not in ("all", "ingest", "correlate"):
        cli_fail(f"--stage {stage!r}: expected all, ingest or correlate")

    from schemas.deadletter import reason_of
    from streams.app import DataDirLocked, Worker, create_app
    from streams.logs import configure_logging, logging_config
    from streams.settings import WorkerSettings

    try:  # before anything logs; faust.Worker re-applies it (mode clears the root handlers)
        configure_logging(log_format, loglevel)
    except ValueError as exc:
        cli_fail(str(exc))

    overrides = {
        "app_id": app_id, "clickhouse": clickhouse, "idle_timeout_s": idle_timeout,
        "allowed_lateness_s": lateness, "web_port": web_port,
    }
    from confluent_kafka import KafkaException

    from transport.kafka_settings import KafkaSettings
    from streams.app import declare_topics

    try:
        settings = WorkerSettings(**{k: v for k, v in overrides.items() if v is not None})
        kafka = KafkaSettings()
    except ValueError as exc:  # pydantic.ValidationError is a ValueError
        cli_fail(f"worker settings: {reason_of(exc, most=None)}")
    logging.getLogger("faultstream.worker").info(
        "worker starting", extra={"app_id": settings.app_id, "bootstrap": kafka.bootstrap_servers, "stage": stage})
    if stage == "ingest":
        from streams.ingest import run_stage

        run_stage(settings, kafka, batch_size, parent_pid)
        return
    try:
        faust_app = create_app(settings, kafka, stage=stage, batch_size=batch_size, loglevel=loglevel,
                               log_format=log_format)
    except DataDirLocked as exc:
        cli_fail(str(exc))
    except KafkaException as exc:  # the ingest stage's client configuration was refused
        cli_fail(f"Kafka at {kafka.bootstrap_servers}: {exc}")
    except ValueError as exc:  # invalid remediation / executor settings (pydantic)
        cli_fail(f"worker settings: {reason_of(exc, most=None)}")
    except OSError as exc:  # the data directory cannot be created or locked
        cli_fail(f"data directory {settings.data_dir}: {exc}")
    try:
        declare_topics(settings, kafka)
    except (KafkaException, RuntimeError) as exc:
        cli_fail(f"Kafka at {kafka.bootstrap_servers}: {exc}")
    json_config = logging_config(log_format, loglevel) if log_format == "json" else None  # text: Faust's own
    Worker(faust_app, loglevel=loglevel, logging_config=json_config,
                  shutdown_timeout_s=settings.shutdown_timeout_s).execute_from_commandline()


@app.command()
def verdicts(
    follow: bool = typer.Option(False, "--follow", "-f", help="keep waiting for new verdicts"),
    fmt: Format = typer.Option(Format.text, "--format", help=FORMAT_HELP + " (line suits --follow)"),
    json_alias: bool = JSON_ALIAS,
    verbose: bool = typer.Option(False, "--verbose", "-v", help="text: also the coverage table and every timeline row"),
    workload: Optional[str] = typer.Option(None, "--workload", help="only this workload (scope id)"),
    topic: Optional[str] = typer.Option(None, "--topic", help="default: <FAULTSTREAM_TOPIC_PREFIX>.attributions"),
    bootstrap: Optional[str] = SourceOption["bootstrap"],
    idle_timeout: float = typer.Option(5.0, "--idle-timeout", min=0.1,
                                       help="without --follow: stop after this many seconds without a record"),
    timeout: float = SourceOption["timeout"],
    connect_timeout: Optional[float] = typer.Option(None, "--connect-timeout", min=0.1, hidden=True,
                                                    help="the same as --timeout"),
) -> None:
    """Print the verdicts on the attributions topic (every revision, in topic order).

    A tombstone (the null value after a withdrawn verdict, already printed) prints nothing; a
    record that is not a verdict (bad JSON, another schema) is skipped with a warning on
    stderr; a broker that does not answer within --timeout seconds exits 2 with a message."""
    from confluent_kafka import KafkaException

    from schemas.topics import catalogue
    from transport.kafka_settings import KafkaSettingsError, kafka_settings

    try:
        kafka = kafka_settings(bootstrap)
    except KafkaSettingsError as exc:
        cli_fail(str(exc))
    name = topic or catalogue()["attributions"].name
    fmt = _format(fmt, json_alias)
    consumer = _verdict_consumer(kafka, name, connect_timeout if connect_timeout is not None else timeout)
    out = output_console()
    skipped = 0
    try:
        for att in _read_verdicts(consumer, follow=follow, idle_timeout=idle_timeout):
            if att is None:
                skipped += 1
            elif not workload or att.scope.id == workload:
                _print_verdicts([att], fmt, verbose, out)
    except KafkaException as exc:
        cli_fail(f"Kafka at {kafka.bootstrap_servers}: {exc}")
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()
    if skipped:
        err.print(f"{skipped} records skipped: not verdicts", markup=False, highlight=False)


def _verdict_consumer(kafka: Any, topic: str, timeout_s: float) -> Any:
    """A consumer of ``topic`` from its start in a group of its own, once a broker answered
    within ``timeout_s`` seconds (else exit 2); warns on stderr when the topic does not exist
    yet."""
    import uuid

    from confluent_kafka import Consumer, KafkaException

    consumer = Consumer(kafka.confluent_config() | {
        "group.id": f"faultstream-verdicts-{uuid.uuid4().hex}",
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "log_level": 0,  # connection errors are reported below, once
    })
    try:
        # raises KafkaException when no broker answers in time
        metadata = consumer.list_topics(topic, timeout=timeout_s)
    except KafkaException as exc:
        consumer.close()
        detail = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else str(exc)
        cli_fail(f"Kafka at {kafka.bootstrap_servers}: no broker answered within {timeout_s:g} s ({detail})")
    known = metadata.topics.get(topic)
    if known is None or known.error is not None:
        err.print(f"warning: topic {topic} does not exist (yet)", markup=False, highlight=False)
    consumer.subscribe([topic])
    return consumer


def _read_verdicts(consumer: Any, *, follow: bool, idle_timeout: float):
    """Yield each verdict on the consumer's topic (an :class:`schemas.records.Attribution`),
    or None for a record that is not one (warned on stderr); tombstones are passed over.
    Without ``follow`` it ends after ``idle_timeout`` seconds without a record. Raises
    ``KafkaException`` on a consumer error."""
    import time

    from confluent_kafka import KafkaException
    from pydantic import ValidationError

    from schemas.records import Attribution

    idle_since = time.monotonic()
    while follow or time.monotonic() - idle_since < idle_timeout:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            raise KafkaException(msg.error())
        idle_since = time.monotonic()
        if msg.value() is None:
            continue
        try:
            att = Attribution.model_validate_json(msg.value())
        except (ValueError, ValidationError, RecursionError) as exc:
            err.print(f"warning: skipped {msg.topic()}/{msg.partition()}/{msg.offset()}: not a verdict: "
                      f"{str(exc).splitlines()[0][:200]}", markup=False, highlight=False)
            att = None
        yield att


@schemas_app.command("export")
def schemas_export(out_dir: Path = typer.Argument(Path("schemas/json"), help="output directory")) -> None:
    """Write one JSON Schema file per record type."""
    from schemas.export import export_json_schemas

    try:
        written = export_json_schemas(out_dir)
    except OSError as exc:
        cli_fail(f"{out_dir}: not a directory" if out_dir.exists() and not out_dir.is_dir()
                 else f"{exc.filename or out_dir}: {exc.strerror or exc}")
    for path in written:
        typer.echo(str(path))


@rules_app.command("suggest")
def rules_suggest(
    bundles: list[Path] = typer.Argument(..., help="incident bundle directories"),
    min_count: int = typer.Option(1, "--min-count", min=1, help="only templates with at least N lines"),
) -> None:
    """Print a YAML rule skeleton (template, keywords, pattern, example line) for each
    template of error-severity lines that no rule knows, most frequent first. Fill in its
    source, event type and fields, then load it with the pack (correlators/rules/)."""
    from connectors.bundle import BundleError
    from correlators.rules import load_rule_pack
    from correlators.unrecognised import EVENT_TYPE, mine_templates, suggest_rules
    from streams.replay import replay_bundle

    pack = load_rule_pack()
    fallbacks = {r.ref for r in pack.rules if r.fallback}
    unknown = []
    for bundle in bundles:
        try:
            result = replay_bundle(bundle)
        except BundleError as exc:
            cli_fail(str(exc))
        # a line only a fallback rule read (a bare NCCL WARN, an uncaught exception) is offered
        # like one no rule knows: a specific rule would say what it means
        unknown.extend(e for e in result.events if e.type == EVENT_TYPE or e.rule in fallbacks)
    typer.echo(suggest_rules(mine_templates(unknown), min_count=min_count), nl=False)


@rules_app.command("coverage")
def rules_coverage(
    misses_only: bool = typer.Option(False, "--misses", help="only the entries missed in some framing"),
) -> None:
    """Print the framing matrix: per vocabulary (CUDA names and descriptions, XID, SXID, DCGM,
    NVML, NCCL results) its entries' hits in each framing (bare, syslog, journald, dmesg, pdsh,
    CRI, kubectl, JSON, Python, glog, continuation) and the events its negative framings (source
    line, comment, help texts, skipped lists) gave although they must not; then each missed
    entry. Exit 1 on any miss or false positive."""
    from rich.table import Table

    from correlators.rules import load_rule_pack
    from correlators.rules.coverage import FRAMINGS, NEGATIVE_FRAMINGS, coverage_matrix

    rows = coverage_matrix(load_rule_pack())
    vocabularies = sorted({r.entry.vocabulary for r in rows})
    table = Table(title="vocabulary x framing (hits / entries)", title_justify="left")
    table.add_column("framing")
    for v in vocabularies:
        table.add_column(v, justify="right")
    for framing in list(FRAMINGS) + [f"not: {n}" for n in NEGATIVE_FRAMINGS]:
        cells = []
        for v in vocabularies:
            mine = [r for r in rows if r.entry.vocabulary == v]
            if framing.startswith("not: "):
                wrong = sum(framing[5:] in r.false_positives for r in mine)
                cells.append(f"{wrong} wrong" if wrong else "0")
            else:
                cells.append(f"{sum(framing in r.hits for r in mine)}/{len(mine)}")
        table.add_row(framing, *cells)
    console = Console()
    if not misses_only:
        console.print(table)
    bad = [r for r in rows if r.misses or r.false_positives]
    for r in bad:
        console.print(f"{r.entry.vocabulary} {r.entry.name}: missed in {', '.join(r.misses) or '-'}; "
                      f"wrong in {', '.join(r.false_positives) or '-'}", markup=False)
    hits = sum(len(r.hits) for r in rows)
    console.print(f"{len(rows)} entries x {len(FRAMINGS)} framings: {hits} hits, "
                  f"{len(rows) * len(FRAMINGS) - hits} misses, {sum(len(r.false_positives) for r in rows)} false positives",
                  markup=False)
    if bad:
        raise typer.Exit(1)


@app.command()
def ui(
    clickhouse: str = typer.Option(
        DEFAULT_CLICKHOUSE, "--clickhouse", envvar="FAULTSTREAM_CLICKHOUSE", help="chdb://DIR or http(s)://host:8123"
    ),
    database: Optional[str] = typer.Option(None, "--database", help="the database the sink writes [faultstream]"),
    host: Optional[str] = typer.Option(None, "--host", help="address to listen on [127.0.0.1]"),
    port: Optional[int] = typer.Option(None, "--port", min=1, max=65535, help="port to listen on [8077]"),
    allow_commands: bool = typer.Option(False, "--allow-commands", help="offer approve / reject: needs a command key "
                                        "(FAULTSTREAM_COMMAND_KEYS) and UI logins (FAULTSTREAM_UI_TOKENS)"),
    bootstrap: Optional[str] = typer.Option(None, "--bootstrap", help="Kafka host:port[,...] for decisions "
                                                                      "(default: KAFKA_BOOTSTRAP_SERVERS)"),
    poll: Optional[float] = typer.Option(None, "--poll", min=0.5, help="seconds between the list's refreshes [5]"),
) -> None:
    """Serve the web incident explorer over the verdicts in ClickHouse: the incident list
    (filters, live), each incident's page and timeline, the fabric, nodes and the remediation
    queue. Read-only unless --allow-commands; then approving or rejecting needs a login and
    sends the signed command `faultstream remediation approve` would. Settings: streams/ui/settings.py."""
    from pydantic import ValidationError

    from streams.ui.app import serve
    from streams.ui.settings import UISettings, UISettingsError
    from streams.ui.queries import StoreError

    given = {"database": database, "host": host, "port": port, "bootstrap": bootstrap, "poll_s": poll,
             "allow_commands": True if allow_commands else None}
    try:
        settings = UISettings(clickhouse=clickhouse, **{k: v for k, v in given.items() if v is not None})
    except ValidationError as exc:
        cli_fail("ui settings: " + "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()))
    except ValueError as exc:  # pydantic-settings' SettingsError: a FAULTSTREAM_UI_* value that is not JSON
        cli_fail(f"ui settings: {exc}")
    if settings.allow_commands and settings.host not in ("127.0.0.1", "::1", "localhost") and not settings.secure_cookies:
        typer.echo("warning: decisions are allowed on a non-loopback address without FAULTSTREAM_UI_SECURE_COOKIES: "
                   "serve it behind TLS", err=True)
    def announce() -> None:
        typer.echo(f"faultstream ui: http://{settings.host}:{settings.port}/ over {settings.clickhouse} "
                   f"({'decisions allowed, login required' if settings.allow_commands else 'read-only'})", err=True)

    try:
        serve(settings, announce=announce)
    except (UISettingsError, StoreError) as exc:
        cli_fail(str(exc))
    except OSError as exc:
        cli_fail(f"--host {settings.host} --port {settings.port}: {exc.strerror or exc}")


def main() -> None:  # pragma: no cover - console entry
    app()



# -- connect: publishers to Kafka, one command per registered connector (connectors/registry.py)
from connectors.registry import ConnectGroup  # noqa: E402

connect_app = typer.Typer(cls=ConnectGroup, help="Publish inputs (bundles, log files, ...) to Kafka.",
                          no_args_is_help=True)
app.add_typer(connect_app, name="connect")


from streams.remediation.cli import app as remediation_app  # noqa: E402

app.add_typer(remediation_app, name="remediation")


# -- topics: the topic catalogue (schemas/topics.py) on a broker -------------------------------
topics_app = typer.Typer(help="Kafka topics of the catalogue (schemas/topics.py).", no_args_is_help=True)
app.add_typer(topics_app, name="topics")


def _topics_settings(bootstrap: str | None):
    """KafkaSettings from the environment, with ``--bootstrap`` overriding the servers
    (:func:`transport.kafka_settings.kafka_settings`); invalid settings exit 2."""
    from transport.kafka_settings import KafkaSettingsError, kafka_settings

    try:
        return kafka_settings(bootstrap)
    except KafkaSettingsError as exc:
        cli_fail(str(exc))


@topics_app.command("create")
def topics_create(
    bootstrap: str = typer.Option(None, "--bootstrap", help="host:port[,...] (default: KAFKA_BOOTSTRAP_SERVERS)"),
    partitions: int = typer.Option(None, "--partitions", min=1, help="override every topic's partition count"),
    prefix: Optional[str] = SourceOption["topic_prefix"],
    prefix_alias: Optional[str] = TOPIC_PREFIX_ALIAS,
    timeout: float = typer.Option(30.0, "--timeout", min=0.1, help="seconds per admin request"),
) -> None:
    """Create the catalogue's topics that do not exist yet (idempotent); exit 1 when an existing
    topic's partitions or cleanup policy differ, 2 when the broker cannot be reached."""
    from confluent_kafka import KafkaException

    from schemas.topics import TopicMismatchError, catalogue, create_topics

    settings = _topics_settings(bootstrap)
    specs = catalogue(prefix_alias or prefix)
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
        cli_fail(f"Kafka at {settings.bootstrap_servers}: {detail}")
    for spec in specs.values():
        typer.echo(f"{'created' if spec.name in created else 'exists '} {spec.name}")


@topics_app.command("list")
def topics_list(
    prefix: Optional[str] = SourceOption["topic_prefix"],
    prefix_alias: Optional[str] = TOPIC_PREFIX_ALIAS,
) -> None:
    """Print the catalogue: name, key, value schema, partitions, cleanup policy, retention."""
    from rich.table import Table
    from rich.text import Text

    from schemas.topics import catalogue

    table = Table("topic", "key", "value", "partitions", "cleanup", "retention")
    for spec in catalogue(prefix_alias or prefix).values():
        retention = "-" if spec.retention_ms is None else f"{spec.retention_ms / 86_400_000:g} d"
        # the key recipes hold [..] lists: plain text, not rich markup
        table.add_row(spec.name, Text(spec.key), spec.value_schema or "-", str(spec.partitions), spec.cleanup_policy,
                      retention)
    output_console(piped_width=160).print(table)


if __name__ == "__main__":  # pragma: no cover -- after every sub-app is registered
    app()
