"""``freshview pipeline run FILE``: a pipeline file's sources, views and sinks, until SIGTERM."""

from __future__ import annotations

import logging
import signal
import sys
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

app = typer.Typer(help="Pipelines over message brokers: sources, views and sinks in one SQL file.",
                  no_args_is_help=True)
console = Console(stderr=False)


@app.command("run")
def run(
    file: Path = typer.Argument(..., exists=True, dir_okay=False, help="The pipeline's SQL file."),
    state_dir: Optional[Path] = typer.Option(None, help="Where the pipeline keeps its state (default: "
                                             "~/.local/state/freshview/pipeline-<file name>)."),
    execution: str = typer.Option("auto", help="How steps run: auto, local or spark."),
    max_batch: int = typer.Option(10_000, help="Messages per source per step (a transaction is never split)."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress lines; warnings and errors only."),
    progress_every: float = typer.Option(5.0, help="Seconds between progress lines."),
) -> None:
    """Run a pipeline in the foreground: messages in, views kept, changes out, exactly once (SIGTERM stops it)."""
    from freshview.cli.logs import LOG_NAME, route_output
    from freshview.errors import FreshviewError
    from freshview.pipeline.runner import PipelineOptions, PipelineRunner
    from freshview.pipeline.spec import parse_pipeline

    directory = state_dir or Path.home() / ".local" / "state" / "freshview" / f"pipeline-{file.stem}"
    directory.mkdir(parents=True, exist_ok=True)
    try:
        spec = parse_pipeline(file.read_text(), str(file))
    except FreshviewError as exc:
        console.print(f"[red]{exc}[/]", markup=True, highlight=False)
        raise typer.Exit(2)
    level = logging.WARNING if quiet else logging.INFO
    with route_output(directory / LOG_NAME, console, level) as log_path:
        if not quiet:
            console.print(f"logs: {log_path}", markup=False, highlight=False, soft_wrap=True)
        runner = PipelineRunner(spec, directory, options=PipelineOptions(max_batch=max_batch, execution=execution))

        def stop(signum, _frame):
            logging.getLogger("freshview").info("signal %s: stopping after the current step", signum)
            runner.stop()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        try:
            runner.open()
            log = logging.getLogger("freshview")
            log.info("pipeline %s: %d sources, %d views, %d sinks; state in %s", file.name, len(spec.sources),
                     len(spec.views), len(spec.sinks), directory)
            last = time.monotonic()

            def show() -> bool:
                nonlocal last
                if not quiet and time.monotonic() - last >= progress_every:
                    last = time.monotonic()
                    console.print(runner.progress.line(), markup=False, highlight=False)
                return False
            runner.run(until=show)
            console.print(f"stopped: {runner.progress.line()}", markup=False, highlight=False)
        except FreshviewError as exc:
            console.print(f"[red]pipeline stopped:[/] {exc}")
            raise typer.Exit(1)
        finally:
            runner.close()
            sys.stdout.flush()
