"""Printing the CLI's tables: rich's own output, made quickly for long ones.

rich lays out and renders every cell of a table through its whole pipeline
(measure, wrap, pad, crop): about a millisecond per row of eight columns.
``fleetctl jobs list`` on a store of 18,000 jobs took 18 s, ``status`` on
5,000 nodes 7 s, nearly all of it in rich (the JSON of the same data: 2 s).

:func:`print_table` prints the same characters faster when no cell needs
rich's layout: every cell is one line of unstyled text and the table fits the
console's width at its natural column widths, so rich would neither wrap nor
cut anything and each body line is the cells padded to their columns between
the box's verticals. Then rich renders only a skeleton (the title, the box's
top, the header and the bottom, at the same fixed column widths: a terminal
keeps its styles there) and the body lines are written between them. Any
table this does not cover (styled cells, several lines in a cell, a table
wider than the console, a layout option ours do not use) is printed by rich.
``tests/cli/test_tables.py`` checks that both give the same output.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich import box as boxes
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from rich.table import Column, Table
from rich.text import Text

#: The table options of ours the quick path reproduces: rich's defaults.
_QUICK_BOX = boxes.HEAVY_HEAD


def print_table(console: Console, table: Table) -> None:
    """Print ``table`` on ``console`` as ``console.print(table)`` does, quickly when it can."""
    console.print(_quick(console, table) or table)


class _Quick:
    """A table whose body lines are made here: rich renders its skeleton (which has the table's
    title, header and column widths and no rows) and prints these lines between its top and its
    bottom, so a terminal's styles, a capture and a closed pipe go as for any renderable."""

    def __init__(self, skeleton: Table, body: list[str]) -> None:
        self.skeleton, self.body = skeleton, body

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = list(Segment.split_lines(console.render(self.skeleton, options)))
        for line in lines[:-1]:  # the title, the box's top, the header and the line under it
            yield from line
            yield Segment.line()
        for text in self.body:
            yield Segment(text)
            yield Segment.line()
        yield from lines[-1]  # the box's bottom
        yield Segment.line()


def _quick(console: Console, table: Table) -> _Quick | None:
    """``table`` as a :class:`_Quick`, or None when rich's own layout is needed."""
    if not table.rows or not _plain_layout(table):
        return None
    header = [_plain(console, c.header) for c in table.columns]
    rows = [[_plain(console, cell) for cell in cells] for cells in zip(*(c.cells for c in table.columns))]
    if any(h is None for h in header) or any(c is None for r in rows for c in r):
        return None
    pad = 2  # padding (0, 1) on each side of a cell, the edges' included
    widths = [max(cell_len(h), *(cell_len(r[i]) for r in rows)) + pad for i, h in enumerate(header)]  # type: ignore[arg-type]
    if sum(widths) + len(widths) + 1 > console.options.max_width:
        return None  # rich would shrink columns and wrap cells
    skeleton = Table(
        *(Column(c.header, justify=c.justify, width=w - pad) for c, w in zip(table.columns, widths)),
        title=table.title)
    box = _QUICK_BOX.substitute(console.options, safe=console.safe_box)
    justify = [c.justify for c in table.columns]
    last = len(rows) - 1
    return _Quick(skeleton, [_row(box, r, widths, justify, last=i == last) for i, r in enumerate(rows)])  # type: ignore[arg-type]


def _plain_layout(table: Table) -> bool:
    """Whether ``table`` uses only the layout the quick path reproduces: rich's defaults, a title,
    and columns with no options but a left or right justification."""
    return (table.box is _QUICK_BOX and table.show_header and table.show_edge and not table.show_lines
            and not table.show_footer and not table.caption and table.width is None and not table.expand
            and table.padding == (0, 1, 0, 1) and table.pad_edge and not table.leading and not table.row_styles
            and not any(row.end_section or row.style for row in table.rows)
            and table.style in ("", "none") and not table.border_style and table.title_justify == "center"
            and table.safe_box is None and table.min_width is None and table.title_style is None
            and not table.collapse_padding and not table.highlight and table.header_style == "table.header"
            and (table.title is None or isinstance(table.title, str))
            and all(c.justify in ("left", "right") and not c.style and not c.header_style and c.width is None
                    and c.min_width is None and c.max_width is None and c.ratio is None and not c.no_wrap
                    and c.overflow == "ellipsis" and c.vertical == "top" and not c.highlight for c in table.columns))


def _plain(console: Console, cell: object) -> str | None:
    """The text rich shows for a cell given as a string (markup read as rich reads it) or a Text, if
    it is one line with no style, no justify of its own and no space at either end (rich strips a
    right-justified cell's); else None."""
    if isinstance(cell, str):
        text = console.render_str(cell, highlight=False)
    elif isinstance(cell, Text):
        if cell.justify is not None:
            return None  # a Text's own justify wins over its column's
        text = cell
    else:
        return None
    plain = text.plain
    if text.spans or text.style or plain != plain.strip() or "\t" in plain or len(plain.splitlines()) > 1:
        return None  # rich styles it, or strips or wraps it (it measures lines by str.splitlines: \u2028, \x1c...)
    return plain


def _row(box: boxes.Box, cells: Sequence[str], widths: Sequence[int], justify: Sequence[str], *, last: bool) -> str:
    left, vertical, right = (box.foot_left, box.foot_vertical, box.foot_right) if last else (
        box.mid_left, box.mid_vertical, box.mid_right)
    parts = []
    for text, width, how in zip(cells, widths, justify):
        space = width - 2 - cell_len(text)
        parts.append(" " + (" " * space + text if how == "right" else text + " " * space) + " ")
    return left + vertical.join(parts) + right
