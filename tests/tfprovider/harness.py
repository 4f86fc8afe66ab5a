"""Point the real ``terraform`` binary at the schema-serving provider.

``install(directory)`` writes one executable per provider (aws, google,
azurerm), each running :mod:`tests.tfprovider.schema_provider` with that
provider's schema from ``tests/tfprovider/schemas/``, and a CLI config whose
``dev_overrides`` send ``hashicorp/<name>`` there. The returned environment
(``TF_CLI_CONFIG_FILE``, ``CHECKPOINT_DISABLE``) makes terraform use them
with no registry: ``terraform init`` is not needed for providers (use
``terraform get`` for local modules).

Terraform starts each provider afresh for every command (a plan starts nine,
about 0.15 s of Python imports and a handshake each). ``SchemaProviders``
starts the three once instead and ``install(directory, providers)`` adds
``TF_REATTACH_PROVIDERS``, so terraform attaches to those (the provider debug
mode): the same schemas and answers, the same output (the dev_overrides
warning included); the example root's plan takes 0.8 s instead of 4.3 s.
A provider that died is not replaced: terraform then fails to reattach (and,
as go-plugin does, kills its pid, which stays ours until ``stop`` reaps it).
"""

from __future__ import annotations

import json
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


class SchemaProviders:
    """The three schema-serving providers, running (``schema_provider.py --reattach``)
    until ``stop``, each on a unix socket in ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.processes: dict[str, subprocess.Popen] = {}
        self.sockets: dict[str, Path] = {}
        try:
            for name, schema in SCHEMAS.items():
                self.sockets[name] = directory / f"{name}.sock"
                with (directory / f"{name}.stderr").open("w") as err:
                    self.processes[name] = subprocess.Popen(
                        [sys.executable, str(HERE / "schema_provider.py"), str(schema), "--reattach",
                         str(self.sockets[name])],
                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, text=True)
            for name, proc in self.processes.items():
                assert proc.stdout is not None
                if proc.stdout.readline().strip() != "ready":  # it listens once it says so
                    proc.wait()
                    raise RuntimeError(f"the {name} schema provider did not start (exit {proc.returncode}): "
                                       + (directory / f"{name}.stderr").read_text())
        except BaseException:
            self.stop()
            raise

    def reattach(self) -> str:
        """``TF_REATTACH_PROVIDERS``: go-plugin's reattach config of each; ``Test``: terraform leaves it running."""
        return json.dumps({
            f"registry.terraform.io/hashicorp/{name}": {
                "Protocol": "grpc", "ProtocolVersion": 6, "Pid": proc.pid, "Test": True,
                "Addr": {"Network": "unix", "String": str(self.sockets[name])}}
            for name, proc in self.processes.items()})

    def stop(self) -> None:
        for proc in self.processes.values():
            proc.terminate()
        for proc in self.processes.values():
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


def install(directory: Path, providers: SchemaProviders | None = None) -> dict[str, str]:
    """The CLI config (and the plugins it names) in ``directory``, and the
    environment that points terraform at them; with ``providers``, terraform
    reattaches to those instead of starting a provider for each command."""
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
        **({"TF_REATTACH_PROVIDERS": providers.reattach()} if providers else {}),
    }


def terraform(cwd: Path, env: dict[str, str], *args: str, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess:
    """Run the real ``terraform`` binary in ``cwd``; fail the test (with its
    output) on an exit code not in ``ok``."""
    done = subprocess.run(["terraform", *args, "-no-color"], cwd=cwd, env=env, capture_output=True, text=True,
                          check=False, timeout=300)
    assert done.returncode in ok, f"terraform {' '.join(args)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done
