"""How `hpceval results` (runs, or a watch's steps) writes a table: format, file, parquet."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click


def output_format(fmt: str, as_json: bool) -> str:
    """--json is --format json; with another --format it is a usage error."""
    if not as_json:
        return fmt
    if fmt not in ("table", "json"):
        raise click.UsageError("--json is --format json: give one of them")
    return "json"


def emit(fmt: str, output: str | None, rows: int, frame: Callable[[], Any],
         text: Callable[[], str]) -> None:
    """Parquet (binary: `frame()` to --output FILE only) or `text()` to stdout or FILE."""
    if fmt == "parquet":
        from hpceval.results.table import parquet_available, write_parquet

        if not parquet_available():
            raise click.ClickException("parquet needs pyarrow, which is not installed here "
                                       "(pip install pyarrow); use --format csv or json")
        if not output:
            raise click.UsageError("--format parquet writes a file: give --output FILE")
        write_parquet(frame(), Path(output))
        click.echo(f"wrote {rows} rows to {output}", err=True)
        return
    body = text()
    if output:
        Path(output).write_text(body, encoding="utf-8")
        click.echo(f"wrote {rows} rows to {output}", err=True)
    else:
        click.echo(body, nl=False)
