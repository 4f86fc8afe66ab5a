"""`fleetctl docs`: the pages that help texts and error messages name, installed with the package."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from fleetctl.cli.docs_cmd import DOCS, pages
from fleetctl.cli.main import app

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_every_page_the_code_names_is_one_fleetctl_docs_shows():
    """A help text or message that names docs/X.md names a page an installed fleetctl can show."""
    named = {m for folder in ("fleetctl", "providers", "forecasting") for f in (REPO / folder).rglob("*.py")
             for m in re.findall(r"docs/([a-z0-9-]+)\.md", f.read_text(encoding="utf-8"))}
    assert named and named <= set(pages()), sorted(named - set(pages()))
    assert DOCS.resolve() == (REPO / "docs").resolve()  # in a checkout: the symlink to docs/
    assert set(pages()) == {p.stem for p in (REPO / "docs").glob("*.md")}


def test_docs_lists_shows_and_refuses():
    listed = runner.invoke(app, ["docs"])
    assert listed.exit_code == 0 and "terraform    Terraform and the API: who owns what" in listed.output, listed.output
    for name in ("reasons", "docs/reasons.md", "reasons.md"):
        shown = runner.invoke(app, ["docs", name])
        assert shown.exit_code == 0 and shown.output == (REPO / "docs" / "reasons.md").read_text(), name
    where = runner.invoke(app, ["docs", "terraform", "--path"])
    assert where.exit_code == 0 and Path(where.output.strip()).read_text() == (REPO / "docs" / "terraform.md").read_text()
    unknown = runner.invoke(app, ["docs", "terrafrom"])
    assert unknown.exit_code == 2 and "no page 'terrafrom'; the pages are: azure, backtest" in unknown.output
