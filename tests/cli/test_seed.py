"""``--seed`` (and ``FLEETCTL_SEED``) is a whole number, 0 or more, on every command that takes it."""

from __future__ import annotations

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


SEEDED = [p for p in PATHS if not hasattr(_command(p), "commands")
          and any("--seed" in param.opts for param in _command(p).params)]


def test_the_commands_with_a_seed_are_found():
    assert {("plan",), ("daemon",), ("backtest",), ("trace", "import", "alibaba-2023"),
            ("forecast", "train", "demand")} <= set(SEEDED)


@pytest.mark.parametrize("path", SEEDED, ids=lambda p: " ".join(p))
def test_a_negative_seed_is_refused_naming_the_option(path):
    """A negative seed was taken as is by the sandbox, backtest and trace import. Only the
    command line is read (``make_context``): the command itself does not run."""
    with pytest.raises(typer.BadParameter) as refused:
        _command(path).make_context("fleetctl", ["--seed", "-1"])
    message = refused.value.format_message()
    assert "Invalid value for '--seed'" in message and "greater than or equal to 0" in message, message


@pytest.mark.parametrize("path", [("status",), ("reconcile", "--once"), ("plan",)], ids=lambda p: p[0])
@pytest.mark.parametrize("how", ["option", "env"])
def test_a_negative_seed_is_refused_before_anything_is_done(path, how, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # were it taken, the sandbox's state would be written here
    args, env = ([*path, "--seed", "-5"], {}) if how == "option" else (list(path), {"FLEETCTL_SEED": "-5"})
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200", "FLEETCTL_SEED": None, **env},
                                prog_name="fleetctl")
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--seed'" in result.output and "greater than or equal to 0" in result.output, \
        result.output
    assert list(tmp_path.iterdir()) == []
