"""Point the real ``terraform`` binary at the schema-serving provider.

``install(directory)`` writes one executable per provider (aws, google,
azurerm), each running :mod:`tests.tfprovider.schema_provider` with that
provider's schema from ``tests/tfprovider/schemas/``, and a CLI config whose
``dev_overrides`` send ``hashicorp/<name>`` there. The returned environment
(``TF_CLI_CONFIG_FILE``, ``CHECKPOINT_DISABLE``) makes terraform use them
with no registry: ``terraform init`` is not needed for providers (use
``terraform get`` for local modules).
"""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCHEMAS = {
    "aws": HERE / "schemas" / "aws-6.19.0.subset.schema.json",
    "google": HERE / "schemas" / "google-7.9.0.subset.schema.json",
    "azurerm": HERE / "schemas" / "azurerm-4.51.0.subset.schema.json",
}


def install(directory: Path) -> dict[str, str]:
    plugins = directory / "plugins"
    plugins.mkdir(parents=True, exist_ok=True)
    overrides = []
    for name, schema in SCHEMAS.items():
        exe = plugins / f"terraform-provider-{name}"
        exe.write_text(
            "#!/bin/sh\n"
            f"exec {shlex.quote(sys.executable)} {shlex.quote(str(HERE / 'schema_provider.py'))} "
            f"{shlex.quote(str(schema))}\n"
        )
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        overrides.append(f'    "hashicorp/{name}" = "{plugins}"')
    config = directory / "terraformrc"
    config.write_text("provider_installation {\n  dev_overrides {\n" + "\n".join(overrides)
                      + "\n  }\n  direct {}\n}\n")
    return {
        **os.environ,
        "TF_CLI_CONFIG_FILE": str(config),
        "CHECKPOINT_DISABLE": "1",
        "TF_IN_AUTOMATION": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE.parent.parent), os.environ.get("PYTHONPATH", "")])),
    }


def terraform(cwd: Path, env: dict[str, str], *args: str, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess:
    """Run the real ``terraform`` binary in ``cwd``; fail the test (with its
    output) on an exit code not in ``ok``."""
    done = subprocess.run(["terraform", *args, "-no-color"], cwd=cwd, env=env, capture_output=True, text=True,
                          check=False, timeout=300)
    assert done.returncode in ok, f"terraform {' '.join(args)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done
