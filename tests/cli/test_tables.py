"""The CLI's tables (fleetctl.cli.tables.print_table): the quick path prints exactly what rich prints.

rich took about a millisecond a row (``jobs list`` on 18,000 jobs: 15-18 s); the quick path makes
the body lines itself when no cell needs rich's layout. These tests compare the two outputs
character for character, on seeded random tables under several consoles, and on the real
``jobs list`` and ``status`` tables.
"""

from __future__ import annotations

import io
import random

import pytest
from rich.console import Console
from rich.table import Table
from rich.text import Text
from typer.testing import CliRunner

import fleetctl.cli.tables as tables
from fleetctl.cli.common import console
from fleetctl.cli.main import app
from fleetctl.model import JobState
from fleetctl.store import Store
from tests.builders import T0, job, node, offer

ALPHABET = "abc xyz-_/.,0123456789漢字é"
ODD_CELLS = ["[b]x[/b]", "a[1]", "[x]", ":smile:", "\\[b]", "n-1, n-2", "a\x1b[31mred", "\x07bell", " lead",
             "trail ", "two\nlines", "tab\there", ""]


class _AsciiFile(io.StringIO):
    encoding = "ascii"  # rich draws an ASCII box for it


CONSOLES = [
    dict(width=400),  # piped, as fleetctl.cli.common.piped_width sets it
    dict(width=60),  # too narrow for most: rich wraps, and the quick path must step aside
    dict(width=160, force_terminal=True, color_system="truecolor"),  # a terminal's bold header, italic title
    dict(width=300, force_terminal=True, color_system="standard"),
    dict(width=250, force_terminal=True, no_color=True),
    dict(width=400, safe_box=True),
    dict(width=400, ascii_file=True),
]


def _random_table(rnd: random.Random) -> Table:
    def cell():
        if rnd.random() < 0.08:
            return rnd.choice(ODD_CELLS)
        text = "".join(rnd.choice(ALPHABET) for _ in range(rnd.randint(1, 30)))
        text = text.strip() if rnd.random() < 0.8 else text
        return Text(text) if rnd.random() < 0.1 else text

    columns = rnd.randint(1, 9)
    table = Table(title=rnd.choice([None, "12 jobs", "a long title " * rnd.randint(1, 30), "[x] 3 nodes"]))
    for _ in range(columns):
        table.add_column(rnd.choice(["id", "state", "$/h", "a very long column header", "x", ""]),
                         justify=rnd.choice(["left", "right"]))
    for _ in range(rnd.randint(0, 12)):
        table.add_row(*[cell() for _ in range(columns)], end_section=rnd.random() < 0.02)
    return table


def _printed(table: Table, quick: bool, width: int, ascii_file: bool = False, **options) -> str:
    out = _AsciiFile() if ascii_file else io.StringIO()
    console = Console(file=out, highlight=False, soft_wrap=True, emoji=False, width=width, **options)
    if quick:
        tables.print_table(console, table)
    else:
        console.print(table)
    return out.getvalue()


def test_the_quick_path_prints_what_rich_prints():
    seed = 0
    rnd = random.Random(seed)
    quick = 0
    for trial in range(80):
        table = _random_table(rnd)
        for options in CONSOLES:
            expected = _printed(table, False, **options)
            assert _printed(table, True, **options) == expected, (seed, trial, options)
            probe = Console(file=_AsciiFile() if options.get("ascii_file") else io.StringIO(), width=options["width"],
                            **{k: v for k, v in options.items() if k not in ("width", "ascii_file")})
            quick += tables._quick(probe, table) is not None
    assert quick > 60  # the comparison covers the quick path, not only rich's own


def test_tables_the_quick_path_leaves_to_rich():
    console = Console(file=io.StringIO(), width=400)
    plain = Table(title="t")
    plain.add_column("a")
    plain.add_row("x")
    assert tables._quick(console, plain) is not None
    for change in ({"show_lines": True}, {"caption": "c"}, {"expand": True}, {"box": None}):
        table = Table(title="t", **change)
        table.add_column("a")
        table.add_row("x")
        assert tables._quick(console, table) is None, change
    styled = Table()
    styled.add_column("a", style="red")
    styled.add_row("x")
    assert tables._quick(console, styled) is None
    marked = Table()
    marked.add_column("a")
    marked.add_row("[bold]x[/bold]")  # markup: a styled cell
    assert tables._quick(console, marked) is None
    assert tables._quick(Console(file=io.StringIO(), width=10), plain) is not None
    wide = Table()
    wide.add_column("a")
    wide.add_row("x" * 20)
    assert tables._quick(Console(file=io.StringIO(), width=10), wide) is None  # rich wraps it


@pytest.fixture
def url(tmp_path):
    url = f"sqlite:///{tmp_path / 'state.db'}"
    store = Store(url)
    try:
        cheap = offer("g1", gpus=1, price=0.9)
        store.put_node(node("n-1", of=cheap), T0)
        store.put_node(node("n-2", of=offer("g8", gpus=8, price=21.5)), T0)
        store.add_jobs([job(f"q-{i:03d}", team=f"team-{i % 3}") for i in range(40)]
                       + [job("r-1", state=JobState.RUNNING, node_ids=("n-1",)),
                          job("r-2", workers=2, gpus=4, state=JobState.RUNNING, node_ids=("n-2", "n-2"))], T0)
    finally:
        store.close()
    return url


@pytest.mark.parametrize("args", [("jobs", "list"), ("jobs", "list", "--all"), ("status",)])
def test_the_cli_tables_take_the_quick_path_and_print_the_same(url, monkeypatch, args):
    rendered_rows: list[int] = []
    render = Table._render

    def counting(self, *a, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        rendered_rows.append(len(self.rows))
        return render(self, *a, **kw)

    monkeypatch.setattr(Table, "_render", counting)
    # made at import, as wide as the output was then (400 piped; a terminal's or $COLUMNS' width in a
    # test worker): the width a pipe gets, which these tables fit
    monkeypatch.setattr(console, "width", 400)
    quick = CliRunner().invoke(app, [*args, "--state", url])
    assert quick.exit_code == 0, quick.output
    assert rendered_rows == [0], rendered_rows  # rich drew only the skeleton
    monkeypatch.setattr(tables, "_quick", lambda console, table: None)
    rich_own = CliRunner().invoke(app, [*args, "--state", url])
    assert rich_own.exit_code == 0, rich_own.output
    assert rendered_rows[-1] > 0
    assert quick.output == rich_own.output


@pytest.mark.parametrize("cell", ["aaaa\u2028bbbb", "aaaa\u2029bbbb", "aaaa\x1cbbbb", "aaaa\x85bbbb"],
                         ids=["line-separator", "paragraph-separator", "file-separator", "next-line"])
@pytest.mark.parametrize("justify", ["left", "right"])
def test_a_cell_rich_measures_as_several_lines_is_left_to_rich(cell, justify):
    # rich measures a cell by str.splitlines (which also splits at these) and wraps it at '\n' only:
    # the column is as wide as the longest piece, and the cell wraps
    table = Table()
    table.add_column("h", justify=justify)
    table.add_row(cell)
    table.add_row("x")
    for options in CONSOLES:
        assert _printed(table, True, **options) == _printed(table, False, **options), options


@pytest.mark.parametrize("text_justify", ["left", "right", "center", "full", "default"])
@pytest.mark.parametrize("column_justify", ["left", "right"])
def test_a_text_cell_with_its_own_justify_is_printed_as_rich_does(text_justify, column_justify):
    table = Table()
    table.add_column("h", justify=column_justify)
    table.add_row(Text("a b", justify=text_justify))  # a Text's justify wins over its column's
    table.add_row("a longer cell")
    for options in CONSOLES:
        assert _printed(table, True, **options) == _printed(table, False, **options), options


@pytest.mark.parametrize("change", [{"header_style": "bold magenta"}, {"highlight": True}, {"collapse_padding": True},
                                    {"column_highlight": True}], ids=lambda change: next(iter(change)))
def test_table_options_the_quick_path_does_not_reproduce_are_left_to_rich(change):
    column_highlight = change.pop("column_highlight", False)
    table = Table(title="t", **change)
    table.add_column("a", highlight=column_highlight or None)
    table.add_column("b", justify="right", highlight=column_highlight or None)
    table.add_row("x 12", "0.5")
    table.add_row("None", "'q'")
    for options in CONSOLES:
        assert _printed(table, True, **options) == _printed(table, False, **options), options
