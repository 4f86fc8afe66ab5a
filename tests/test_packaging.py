"""fleetctl as a platform team gets it: an sdist and a wheel, built as `python -m build` builds
them (the sdist from a copy of the source tree, the wheel from the unpacked sdist) through the
build backend pyproject.toml names, offline (no build isolation: the test venv has setuptools).

Everything before this ran from the checkout, where fleetctl found ``terraform/modules`` beside
its package; the wheel had no Terraform modules, so ``plan --terraform-dir`` failed wherever
fleetctl was installed with pip."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("fleetctl", "providers", "forecasting")
#: What a developer's checkout may hold at its top that no build reads (.gitignore).
LOCAL = {".git", ".venv", "build", "dist", "fleetctl.egg-info", ".pytest_cache", ".hypothesis", ".fleetctl",
         "models", "plan.json", "p.json"}


def _local(folder: str, names: list[str]) -> set[str]:
    top = Path(folder) == REPO
    return {n for n in names if n == "__pycache__" or (top and n in LOCAL)}


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
], ids=["terraform-modules", "catalog", "migrations"])
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
                    "MANIFEST.in"}
