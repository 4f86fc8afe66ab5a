"""Every command's --help reads whole in an 80-column terminal: no cut words,
no line past the edge, and a whole one-line summary per subcommand."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from fleetctl.cli.main import app


def command_paths() -> list[tuple[str, ...]]:
    paths: list[tuple[str, ...]] = []

    def walk(command, path: tuple[str, ...]) -> None:  # noqa: ANN001 - typer's (vendored) click command
        paths.append(path)
        for name, sub in getattr(command, "commands", {}).items():  # a group's subcommands
            walk(sub, (*path, name))

    walk(typer.main.get_command(app), ())
    return paths


PATHS = command_paths()


def test_the_walk_finds_every_command():
    assert ("apply",) in PATHS and ("forecast", "evaluate", "demand") in PATHS and len(PATHS) >= 29


@pytest.mark.parametrize("columns", [80, 100])
@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "fleetctl")
def test_help_fits_the_terminal_and_cuts_nothing(path, columns):
    shown = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": str(columns), "TERMINAL_WIDTH": None},
                               prog_name="fleetctl")
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert "Usage: fleetctl" in shown.output, shown.output
    assert "…" not in shown.output, shown.output  # rich's option table cut env var names and paths to "…"
    assert max(len(line) for line in lines) <= columns, shown.output
    if "Commands:" in lines:  # each subcommand's summary is whole, not a first sentence cut to "..."
        listed = lines[lines.index("Commands:") + 1:]
        assert listed and not any(line.rstrip().endswith("...") for line in listed), shown.output


def test_jobs_help_lists_its_commands_in_the_order_its_summary_and_the_readme_name_them():
    """It listed submit, cancel, list under "Submit jobs to the queue, list them, cancel them."."""
    shown = CliRunner().invoke(app, ["jobs", "--help"], env={"COLUMNS": "200", "TERMINAL_WIDTH": None},
                               prog_name="fleetctl")
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    listed = [line.split()[0] for line in lines[lines.index("Commands:") + 1:] if line.strip()]
    assert listed == ["submit", "list", "cancel"], shown.output
    assert "Submit jobs to the queue, list them, cancel them." in shown.output


def test_jobs_list_help_names_the_states_only_takes():
    """--only's metavar is STATE; the help did not say which states there are."""
    shown = CliRunner().invoke(app, ["jobs", "list", "--help"], env={"COLUMNS": "200", "TERMINAL_WIDTH": None},
                               prog_name="fleetctl")
    assert shown.exit_code == 0, shown.output
    assert "Only jobs in this state: queued, bound, running, succeeded, failed, cancelled (repeatable)" \
        in " ".join(shown.output.split()), shown.output


def test_prune_help_says_what_it_reads_the_policy_for():
    """prune takes --policy; its help did not say why (the README did: reclaims the policy still avoids)."""
    shown = CliRunner().invoke(app, ["prune", "--help"], env={"COLUMNS": "200", "TERMINAL_WIDTH": None},
                               prog_name="fleetctl")
    assert shown.exit_code == 0, shown.output
    assert "the reclaim notices the planner still reads, even when older than the cut (those within the " \
           "policy's interruptions.reclaimed_offer_ttl_minutes: what --policy is read for)" \
        in " ".join(shown.output.split())


def test_prune_help_says_what_the_finished_history_retention_deletes_and_what_it_always_keeps():
    shown = CliRunner().invoke(app, ["prune", "--help"], env={"COLUMNS": "200", "TERMINAL_WIDTH": None},
                               prog_name="fleetctl")
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    for words in ("jobs that succeeded, failed or were cancelled (last written before the cut)",
                  "nodes gone since before it with the finished launches (done, partial, failed, abandoned)",
                  "the decision events (launch, bind, start, complete, terminate, ...) before it",
                  "Always kept: active jobs", "gone nodes that a kept reclaim notice or an active job names",
                  "pending and unknown launches", "so a retried launch never buys twice",
                  "each deleted job's id, final state and spec (a tombstone, a quarter of the job's row), so its id is "
                  "never reused: re-submitting the job is a no-op, and a changed job under it is refused",
                  "Off unless given",
                  "run `sqlite3 .fleetctl/state.db VACUUM` with the daemon stopped"):
        assert words in text, words


def test_daemon_help_says_when_the_policy_is_read():
    """Nothing said a merged policy change needs a restart; now a SIGHUP reads it again (or refuses it)."""
    shown = CliRunner().invoke(app, ["daemon", "--help"], env={"COLUMNS": "200", "TERMINAL_WIDTH": None},
                               prog_name="fleetctl")
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    assert "The policy is read at start and again on SIGHUP" in text
    assert "is logged and refused, and the daemon goes on with the policy it has" in text
    assert "A cron `reconcile --once` reads the policy on every run." in text


def test_the_default_priority_map_is_not_cut_in_two_at_80_columns():
    """Written as one 58-character value, the default did not fit the help column and click cut it
    mid-word: "LS=production,Guarantee" / "d=production,Burstable=batch,BE=batch"."""
    shown = CliRunner().invoke(app, ["trace", "import", "alibaba-2023", "--help"],
                               env={"COLUMNS": "80", "TERMINAL_WIDTH": None}, prog_name="fleetctl")
    assert shown.exit_code == 0, shown.output
    words = shown.output.split()
    for entry in ("LS=production,", "Guaranteed=production,", "Burstable=batch,", "BE=batch."):
        assert entry in words, shown.output


@pytest.mark.parametrize("command", [("status",), ("report",)])
def test_policy_help_of_commands_that_read_it_only_when_named_gives_no_default_file(command):
    """status (on the sandbox) and report read the policy only when --policy or $FLEETCTL_POLICY
    names one, as their summaries say; the option's help said "Default: $FLEETCTL_POLICY, else
    policies/example.yaml", which they never read unasked."""
    shown = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200", "TERMINAL_WIDTH": None},
                               prog_name="fleetctl")
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    option = text[text.index("--policy <path>"):]
    option = option[:option.index(" --", 1)]
    assert "read only when given, or when $FLEETCTL_POLICY names one" in option, option
    if command == ("report",):  # status with --cloud aws needs the policy, so it has a default there
        assert "else policies/example.yaml" not in option, option
