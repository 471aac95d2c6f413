"""The ``faultstream`` command line (typer).

Commands:

* ``faultstream replay BUNDLE [--json] [--clickhouse URL | --no-store]`` -- the verdict of one
  incident bundle, for a person (rich) or as JSON Lines of Attributions; events, evidence
  observations and the verdict are written to ClickHouse (embedded chDB under
  ``.state/clickhouse`` by default, or any ``http(s)://`` server).
* ``faultstream score DIR...`` -- replay every bundle with an ``expected.yaml`` below the given
  directories and print hits and misses; exits 1 on any miss.
* ``faultstream schemas export DIR`` -- write the JSON Schema files of every record.

User errors (a bad bundle, an unreachable ClickHouse) print one line on stderr and exit 2;
no traceback.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

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

err = Console(stderr=True)
# clickhouse-connect logs every failed HTTP attempt at ERROR; the sink retries and reports
# one clear error itself
logging.getLogger("clickhouse_connect").setLevel(logging.CRITICAL)


def _fail(message: str, code: int = 2) -> None:
    err.print(f"[bold red]error:[/] {message}", highlight=False)
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
            sink.write_attributions([result.attribution])
            sink.close()
            stored = clickhouse
        except SinkError as exc:
            _fail(f"ClickHouse: {exc}")
    if json_lines:
        sys.stdout.write(canonical_json(result.attribution) + "\n")
        return
    from streams.render import render_attribution

    out = Console() if Console().is_terminal else Console(width=140)
    render_attribution(result.attribution, out)
    out.print(
        f"[dim]{result.lines_read:,} lines read, {len(result.events):,} events"
        + (f", stored in {stored}" if stored else "")
        + "[/]"
    )


@app.command()
def score(dirs: list[Path] = typer.Argument(..., help="directories holding bundles")) -> None:
    """Replay every bundle that has an expected.yaml; exit 1 on any miss (a bundle that
    cannot be replayed or whose expected.yaml is invalid is a miss naming it)."""
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
        rows.append(score_one(result.attribution, result.expected, bundle.name))
    render_score_table(rows, Console())
    if not all(r.hit for r in rows):
        raise typer.Exit(1)


@schemas_app.command("export")
def schemas_export(out_dir: Path = typer.Argument(Path("schemas/json"), help="output directory")) -> None:
    """Write one JSON Schema file per record type."""
    from schemas.export import export_json_schemas

    for path in export_json_schemas(out_dir):
        typer.echo(str(path))


def main() -> None:  # pragma: no cover - console entry
    app()


if __name__ == "__main__":  # pragma: no cover
    app()


# -- connect: publishers to Kafka, one command per registered connector (connectors/registry.py)
from connectors.registry import add_connect_commands  # noqa: E402

connect_app = typer.Typer(help="Publish inputs (bundles, log files, ...) to Kafka.", no_args_is_help=True)
app.add_typer(add_connect_commands(connect_app), name="connect")
