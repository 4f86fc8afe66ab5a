"""fleetctl as a platform team gets it: an sdist and a wheel, built as `python -m build` builds
them (the sdist from a copy of the source tree, the wheel from the unpacked sdist) through the
build backend pyproject.toml names, offline (no build isolation: the test venv has setuptools).

Everything before this ran from the checkout, where fleetctl found ``terraform/modules`` beside
its package; the wheel had no Terraform modules, so ``plan --terraform-dir`` failed wherever
fleetctl was installed with pip. The last test installs the wheel (not editable) and runs the
commands a new user runs, from a directory with none of the checkout's files."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("fleetctl", "providers", "forecasting")
#: What a developer's checkout may hold at its top that no build reads (.gitignore; also any
#: ``.venv*``: ``make venv VENV=.venv312`` for another Python).
LOCAL = {".git", ".venv", "build", "dist", "fleetctl.egg-info", ".pytest_cache", ".hypothesis", ".fleetctl",
         "models", "plan.json", "p.json"}


def _local(folder: str, names: list[str]) -> set[str]:
    top = Path(folder) == REPO
    return {n for n in names if n == "__pycache__" or (top and (n in LOCAL or n.startswith(".venv")))}


def _backend(hook: str, source: Path, out: Path) -> Path:
    """Run one PEP 517 hook of pyproject.toml's backend in ``source``; the file it built."""
    code = ("import sys; from setuptools import build_meta as backend; "
            f"print(backend.{hook}(sys.argv[1]))")
    done = subprocess.run([sys.executable, "-c", code, str(out)], cwd=source, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return out / done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> tuple[Path, Path]:
    """(the sdist, the wheel built from it)."""
    root = tmp_path_factory.mktemp("dist")
    source = root / "source"
    shutil.copytree(REPO, source, symlinks=True, ignore=_local)
    sdist = _backend("build_sdist", source, root)
    with tarfile.open(sdist) as tar:
        tar.extractall(root / "unpacked", filter="data")
    (unpacked,) = (root / "unpacked").iterdir()
    return sdist, _backend("build_wheel", unpacked, root)


@pytest.fixture(scope="module")
def wheel_files(dist) -> set[str]:
    with zipfile.ZipFile(dist[1]) as whl:
        return set(whl.namelist())


def _tracked(folder: Path, pattern: str = "*") -> list[Path]:
    return sorted(p for p in folder.rglob(pattern) if p.is_file() and "__pycache__" not in p.parts)


def test_the_wheel_has_every_module_of_the_packages(wheel_files):
    missing = [p.relative_to(REPO).as_posix() for name in PACKAGES for p in _tracked(REPO / name, "*.py")
               if p.relative_to(REPO).as_posix() not in wheel_files]
    assert not missing


@pytest.mark.parametrize("folder, installed_as", [
    ("terraform/modules", "fleetctl/terraform_modules"),  # plan --terraform-dir copies them into DIR
    ("providers/data", "providers/data"),                  # the catalog snapshots
    ("fleetctl/store/migrations", "fleetctl/store/migrations"),  # alembic's env, template and versions
    ("docs", "fleetctl/docs"),                             # `fleetctl docs`: the pages help and errors name
], ids=["terraform-modules", "catalog", "migrations", "docs"])
def test_the_wheel_has_the_data_fleetctl_reads_at_run_time(wheel_files, folder, installed_as):
    expected = {f"{installed_as}/{p.relative_to(REPO / folder).as_posix()}" for p in _tracked(REPO / folder)}
    assert expected and expected <= wheel_files, sorted(expected - wheel_files)


def test_the_wheel_has_the_modules_terraform_py_copies(wheel_files):
    from fleetctl.terraform import MODULES, SHIPPED_MODULES

    assert SHIPPED_MODULES.relative_to(REPO / "fleetctl").as_posix() == "terraform_modules"
    assert {f"fleetctl/terraform_modules/{m}/main.tf" for m in MODULES} <= wheel_files


def test_the_wheel_has_the_example_policy_policy_init_writes(dist):
    with zipfile.ZipFile(dist[1]) as whl:
        assert whl.read("fleetctl/example_policy.yaml") == (REPO / "policies" / "example.yaml").read_bytes()


def test_the_wheel_holds_only_the_packages(wheel_files):
    tops = {name.split("/", 1)[0] for name in wheel_files}
    assert tops == {*PACKAGES, "fleetctl-0.1.0.dist-info"}
    assert not [n for n in wheel_files if "__pycache__" in n or n.endswith((".pyc", ".db"))]


def test_the_sdist_holds_the_packages_and_no_tests(dist):
    """setuptools adds tests/test*.py to an sdist by default: seven test modules without the
    conftest, builders and data they import, a test suite that cannot run."""
    with tarfile.open(dist[0]) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    tops = {name.split("/", 1)[0] for name in names}
    assert tops == {*PACKAGES, "fleetctl.egg-info", "PKG-INFO", "README.md", "pyproject.toml", "setup.cfg",
                    "MANIFEST.in", "LICENSE"}


def test_the_license_is_an_spdx_expression(dist):
    """A TOML table as project.license made setuptools warn at every build that it stops
    building such projects after 2027-02-18."""
    with zipfile.ZipFile(dist[1]) as whl:
        metadata = whl.read("fleetctl-0.1.0.dist-info/METADATA").decode()
        licence = whl.read("fleetctl-0.1.0.dist-info/licenses/LICENSE").decode()
    assert "\nLicense-Expression: Apache-2.0\n" in metadata
    assert "\nLicense-File: LICENSE\n" in metadata
    assert "Apache License" in licence and "Version 2.0, January 2004" in licence  # the text it declares


# =========================================================================== installed


@pytest.fixture(scope="module")
def installed(dist, tmp_path_factory) -> Path:
    """The wheel installed as pip installs it (its dependencies are the test venv's), with its
    ``fleetctl`` script; on PYTHONPATH it comes before the checkout's editable install."""
    target = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                           "--target", str(target), str(dist[1])], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return target


def _run(site: Path, cwd: Path, *command: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETCTL_")}
    env.update(PYTHONPATH=str(site), COLUMNS="200", FLEETCTL_SIM_LAUNCH_DELAY_SECONDS="0")
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_the_installed_package_works_from_a_directory_without_the_checkout(installed, tmp_path):
    """A platform team's infra repository: no policies/, examples/ or terraform/ beside it."""
    here = tmp_path / "infra-repo"
    here.mkdir()
    fleetctl = (sys.executable, "-m", "fleetctl")
    probe = _run(installed, here, sys.executable, "-c",
                 "import fleetctl, providers, forecasting; print(fleetctl.__file__, providers.__file__, "
                 "forecasting.__file__)")
    assert probe.returncode == 0 and all(Path(f).is_relative_to(installed) for f in probe.stdout.split()), probe
    version = _run(installed, here, str(installed / "bin" / "fleetctl"), "--version")
    assert version.returncode == 0 and version.stdout == "fleetctl 0.1.0\n", version

    page = _run(installed, here, *fleetctl, "docs", "docs/terraform.md")  # as help texts name it
    assert page.returncode == 0 and page.stdout == (REPO / "docs" / "terraform.md").read_text(), page.stderr
    no_policy = _run(installed, here, *fleetctl, "plan")
    assert no_policy.returncode == 1 and "fleetctl policy init" in no_policy.stderr, no_policy.stderr
    assert _run(installed, here, *fleetctl, "policy", "init", "-o", "policies/prod.yaml").returncode == 0
    policy = ("--policy", "policies/prod.yaml")
    shutil.copy(REPO / "examples" / "jobs.yaml", here / "my-jobs.yaml")
    submitted = _run(installed, here, *fleetctl, "jobs", "submit", "my-jobs.yaml", *policy)
    assert submitted.returncode == 0, submitted.stderr
    planned = _run(installed, here, *fleetctl, "plan", "-out", "plan.json", *policy)
    assert planned.returncode == 0 and "+ launch" in planned.stdout, planned.stderr
    applied = _run(installed, here, *fleetctl, "apply", "plan.json", *policy)
    assert applied.returncode == 0 and "Apply complete!" in applied.stdout, applied.stderr
    assert (here / ".fleetctl" / "state.db").is_file()

    # The Terraform half: the modules are copied from the installed package before terraform runs
    # (here a binary that does not exist: registry providers cannot be installed offline).
    (here / "infra").mkdir()  # fleetctl does not create a missing --terraform-dir
    rendered = _run(installed, here, *fleetctl, "plan", "--terraform-dir", "infra", *policy,
                    "--terraform-binary", str(tmp_path / "no-terraform"))
    assert rendered.returncode == 1 and "no-terraform' not found" in rendered.stderr, rendered.stderr
    assert (here / "infra" / "main.tf.json").is_file()
    shipped = {p.relative_to(REPO / "terraform").as_posix(): p.read_bytes() for p in _tracked(REPO / "terraform")}
    copied = {p.relative_to(here / "infra").as_posix(): p.read_bytes() for p in _tracked(here / "infra" / "modules")}
    assert shipped and copied == shipped
