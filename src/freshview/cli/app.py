"""The ``freshview`` command."""

from __future__ import annotations

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="freshview: incremental materialized views on Apache Spark.")


@app.command()
def demo(
    duration: float = typer.Option(60.0, help="Seconds to run the change workload (0 = until Ctrl-C)."),
    orders: int = typer.Option(200_000, help="Initial number of orders."),
    changes: int = typer.Option(500, help="Row changes per step."),
    state_dir: str = typer.Option(None, help="Where operator state lives (default: a temporary directory)."),
) -> None:
    """Run the live API demo on the embedded defaults (local Spark, state on disk)."""
    from freshview.cli.demo import run_demo

    run_demo(duration=duration, n_orders=orders, changes_per_step=changes, state_dir=state_dir)


@app.command()
def version() -> None:
    """Print freshview's version."""
    import freshview

    typer.echo(freshview.__version__)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
