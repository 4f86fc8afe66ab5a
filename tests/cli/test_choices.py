"""An option that takes one of a few words (--format, --terraform-init, --cloud of node-watch,
--only) refuses another as click words it, without the "Value error, " of pydantic's."""

from __future__ import annotations

import enum
import typing

import pytest
import typer
from typer.testing import CliRunner

from fleetctl.cli.main import app
from tests.cli.test_help import PATHS


def _command(path: tuple[str, ...]):  # noqa: ANN202 - typer's (vendored) click command
    command = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]
    return command


def _choices(param) -> type[enum.Enum] | None:  # noqa: ANN001
    annotation = param.type_descriptor.annotation
    for t in typing.get_args(annotation) or (annotation,):
        if isinstance(t, type) and issubclass(t, enum.Enum):
            return t
        inner = typing.get_args(t)  # list[JobState]
        if inner and isinstance(inner[0], type) and issubclass(inner[0], enum.Enum):
            return inner[0]
    return None


OPTIONS = [(path, param.opts[0], choices) for path in PATHS if not hasattr(_command(path), "commands")
           for param in _command(path).params if (choices := _choices(param)) is not None]


def test_the_options_with_choices_are_found():
    assert {(p, o) for p, o, _ in OPTIONS} >= {(("plan",), "--format"), (("status",), "--format"),
                                               (("apply",), "--terraform-init"), (("node-watch",), "--cloud"),
                                               (("jobs", "list"), "--only")}


@pytest.mark.parametrize(("path", "option", "choices"), OPTIONS, ids=[f"{' '.join(p)} {o}" for p, o, _ in OPTIONS])
def test_a_value_not_among_the_choices_is_refused_in_clicks_words(path, option, choices):
    """Was "Invalid value for '--format': Value error, 'xml' is not one of 'text', 'json'." (typer
    checks the choice inside a pydantic validator, which prefixes its message)."""
    with pytest.raises(typer.BadParameter) as refused:
        _command(path).make_context("fleetctl", [option, "xml"])
    listed = ", ".join(repr(c.value) for c in choices)
    envvar = next(p.envvar for p in _command(path).params if p.opts[0] == option)
    hint = f" (env var: '{envvar}')" if envvar else ""  # click names the variable an option also reads
    assert refused.value.format_message() == f"Invalid value for '{option}'{hint}: 'xml' is not one of {listed}."


def test_the_choices_still_parse_and_show_in_the_help():
    context = _command(("jobs", "list")).make_context("fleetctl", ["--only", "QUEUED", "--only", "failed",
                                                                   "--format", "json"])
    assert [s.value for s in context.params["only"]] == ["queued", "failed"]  # --only takes any case
    assert context.params["output"].value == "json"
    with pytest.raises(typer.BadParameter):
        _command(("plan",)).make_context("fleetctl", ["--format", "JSON"])  # --format: the exact word, as before
    shown = CliRunner().invoke(app, ["plan", "--help"], env={"COLUMNS": "200", "TERMINAL_WIDTH": None},
                               prog_name="fleetctl")
    assert "<text|json>" in shown.output and "<init|get>" in shown.output, shown.output
