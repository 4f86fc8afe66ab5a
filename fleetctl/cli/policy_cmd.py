"""`fleetctl policy validate|schema`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from fleetctl.cli.common import console, err_console, fail, output_file_or_exit

app = typer.Typer(help="Validate policy files and write their JSON Schema for editors.", no_args_is_help=True)


@app.command()
def validate(
    files: Annotated[list[Path], typer.Argument(help="Policy YAML files to check.", show_default=False)],
) -> None:
    """Check policy files. Every problem is printed as FILE:LINE:COLUMN: field.path: message;
    exits 2 if any file has one, 0 if all are valid."""
    from fleetctl.policy import load_policy
    from fleetctl.yamlerrors import SpecError

    bad = 0
    for path in files:
        try:
            load_policy(path)
        except SpecError as exc:
            bad += 1
            for issue in exc.issues:
                err_console.print(str(issue), markup=False)
        else:
            console.print(f"{path}: ok", markup=False)
    if bad:
        raise typer.Exit(2)


@app.command(short_help="Write the policy's JSON Schema for editors.")
def schema(
    output_text: Annotated[
        str, typer.Option("-o", "--output", metavar="<path>",
                          help="The file to write the schema to ('-' for stdout); a directory, or a path ending in "
                               "'/', is refused.")
    ] = "policies/schema.json",
) -> None:
    """Write the policy's JSON Schema (for editor completion and checks)."""
    from fleetctl.policy import policy_json_schema

    output = output_file_or_exit("-o", output_text, "schema.json")
    text = json.dumps(policy_json_schema(), indent=2, sort_keys=True) + "\n"
    if str(output) == "-":
        print(text, end="")
        return
    from fleetctl.files import write_text_atomic

    try:
        write_text_atomic(output, text)  # creates missing parent directories
    except OSError as exc:
        fail(f"-o {output}: cannot write the schema: {exc.strerror or exc}", 2)
    console.print(f"wrote {output}", markup=False)
