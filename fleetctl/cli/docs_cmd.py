"""`fleetctl docs [PAGE]`: the pages that `--help` and error messages name
(``docs/NAME.md``), shipped in the package so that an installed fleetctl has
them too (``fleetctl/docs`` is a symlink to ``docs/`` in a checkout; the
wheel holds the files)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from fleetctl.cli.common import console, fail

#: The documentation pages: ``docs/`` of the checkout, or the copy in the installed package.
DOCS = Path(__file__).resolve().parents[1] / "docs"


def pages() -> dict[str, Path]:
    """Each page by name (``terraform`` for ``docs/terraform.md``), sorted."""
    return {p.stem: p for p in sorted(DOCS.glob("*.md"))}


def _title(path: Path) -> str:
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return ""


def docs(
    page: Annotated[Optional[str], typer.Argument(
        help="A page, by name (terraform) or as help and errors name it (docs/terraform.md).",
        show_default=False)] = None,
    path: Annotated[bool, typer.Option("--path", help="Print the page's file path instead of its text.")] = False,
) -> None:
    """Show a documentation page (Markdown), or list them. These are the pages that
    `--help` and error messages name as docs/NAME.md, installed with fleetctl."""
    found = pages()
    if page is None:
        width = max(map(len, found), default=0)
        for name, file in found.items():
            console.print(f"{name:<{width}}  {_title(file)}", markup=False, highlight=False)
        console.print("\n`fleetctl docs NAME` shows one; `--path` gives its file.", markup=False, highlight=False)
        return
    name = page.removeprefix("docs/").removesuffix(".md")
    file = found.get(name)
    if file is None:
        fail(f"no page {page!r}; the pages are: {', '.join(found)}", 2)
    if path:
        print(file)
        return
    sys.stdout.write(file.read_text(encoding="utf-8"))
