"""benchmarks/report_history.py on a tiny store: the command it times reports the same spend as the reads
and computation it times apart, and the rows sum to it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_report_history_times_the_command_and_its_parts_on_a_seeded_store(tmp_path):
    out = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "benchmarks/report_history.py", "--nodes", "20", "--days", "12",
                           "--window-days", "5", "--repeat", "1", "--keep", str(tmp_path / "state.db"),
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    assert doc["written"]["events"] > 0 and len(doc["cli_seconds"]) == 1
    assert doc["command"].startswith("fleetctl report --state sqlite:///") and "--since" in doc["command"]
    part = doc["in_process"]
    assert part["events_read"] > 0 and part["nodes_read"] > 0 and part["total_usd"] > 0
    assert abs(part["total_usd"] - doc["cli_total_usd"]) <= 0.006  # rounded to the cent in-process
    assert abs(part["sum_of_rows_usd"] - part["total_usd"]) <= 0.011
