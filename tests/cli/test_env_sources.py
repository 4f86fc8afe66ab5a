"""A bad value read from an environment variable (a systemd unit's
``Environment=``, a Kubernetes env entry) is named as that variable, not as the
option nobody typed: FLEETCTL_CLOUD, FLEETCTL_STATE and FLEETCTL_NOTICE_ADDR were
each reported as --cloud, --state and --notice-addr."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from fleetctl.cli.main import app

runner = CliRunner()


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("FLEETCTL_CLOUD", "FLEETCTL_STATE", "FLEETCTL_NOTICE_ADDR", "FLEETCTL_NOTICE_TOKEN",
                 "FLEETCTL_POLICY"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def _said(result) -> str:  # noqa: ANN001
    return " ".join(result.output.split())


@pytest.mark.parametrize("command", [["status"], ["plan"], ["reconcile", "--once"]])
def test_a_bad_cloud_variable_is_named(here, monkeypatch, command):
    monkeypatch.setenv("FLEETCTL_CLOUD", "awz")
    result = runner.invoke(app, command)
    assert result.exit_code == 2, result.output  # (plan's 1 is set by the entry point: test_end_to_end)
    assert "Invalid value for '--cloud' (env var: 'FLEETCTL_CLOUD'): 'awz': choose sim" in _said(result)
    assert not (here / ".fleetctl").exists()


def test_the_cloud_option_overrides_a_bad_variable(here, monkeypatch):
    monkeypatch.setenv("FLEETCTL_CLOUD", "awz")
    result = runner.invoke(app, ["jobs", "list", "--cloud", "sim"])
    assert "awz" not in result.output, result.output


@pytest.mark.parametrize("value, words", [
    ("bogus://x", "FLEETCTL_STATE 'bogus://x': 'bogus' is not a database fleetctl knows"),
    ("fleet.db", "FLEETCTL_STATE 'fleet.db' is not a state store URL (sqlite:///path/state.db, or "
     "postgresql+psycopg://user@host/db): FLEETCTL_STATE names where fleetctl keeps its state; for the SQLite "
     "file fleet.db: FLEETCTL_STATE=sqlite:///{here}/fleet.db"),
    ("sqlite:///", "FLEETCTL_STATE 'sqlite:///' is an in-memory SQLite database"),
    ("sqlite:///no-such-dir/state.db", "FLEETCTL_STATE 'sqlite:///no-such-dir/state.db': the directory "
     "no-such-dir does not exist"),
], ids=["scheme", "plain-path", "memory", "no-dir"])
def test_a_bad_state_variable_is_named(here, monkeypatch, value, words):
    monkeypatch.setenv("FLEETCTL_STATE", value)
    result = runner.invoke(app, ["jobs", "list"])
    assert result.exit_code == 2, result.output
    assert words.format(here=here) in _said(result)
    assert "--state" not in _said(result).split("names where")[0]
    # --state, when given, is the one named (and wins over the variable)
    given = runner.invoke(app, ["jobs", "list", "--state", "fleet.db"])
    assert given.exit_code == 2 and "--state 'fleet.db' is not a state store URL" in _said(given)
    assert "FLEETCTL_STATE" not in _said(given)


def test_a_bad_notice_address_variable_is_named(here, monkeypatch):
    monkeypatch.setenv("FLEETCTL_NOTICE_ADDR", "foo")
    result = runner.invoke(app, ["daemon"])
    assert result.exit_code == 2, result.output
    assert ("FLEETCTL_NOTICE_ADDR 'foo': expected HOST:PORT with a port up to 65535, e.g. 127.0.0.1:9109"
            in _said(result))
    given = runner.invoke(app, ["daemon", "--notice-addr", "foo"])
    assert given.exit_code == 2 and "--notice-addr 'foo': expected HOST:PORT" in _said(given)
    assert not (here / ".fleetctl").exists()
