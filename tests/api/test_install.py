"""pip installs what the layout promises: rlm and rlm_sandbox, and nothing with a generic name.

The repository's sandbox/, fixtures/ and prompts/ folders ship as rlm_sandbox, rlm.fixtures and
rlm.prompts (pyproject's package-dir).  A copy of the source is built into a wheel (offline,
without build isolation) whose file list is compared with the source folders; then a regular
install (that wheel) and the editable install the README uses (``pip install -e``) are each
made into a fresh virtual environment that borrows this one's dependencies through a ``.pth``
line (a line, not a site directory: this environment's own editable rlm stays out of it), and
used as a user would, from a directory outside the source: imports and shipped files, the
sandbox child started the ways the host starts it, ``rlm doctor`` and ``rlm run --provider
fixture`` (real sandbox subprocesses).
"""

from __future__ import annotations

import compileall
import json
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from rlm._trace import TRACE_SCHEMA_VERSION
from rlm.fixtures import generate_needle

ROOT = Path(__file__).resolve().parents[2]
#: What a build reads; the copy keeps the build's own files (build/, *.egg-info) out of ROOT.
SOURCE = ("pyproject.toml", "README.md", "rlm", "sandbox", "fixtures", "prompts")
#: Each source folder and where its files are installed.
INSTALLED_AS = {
    "rlm": "rlm",
    "sandbox/rlm_sandbox": "rlm_sandbox",
    "fixtures/rlm/fixtures": "rlm/fixtures",
    "prompts/rlm/prompts": "rlm/prompts",
}

#: Run by each installed environment's interpreter, from a directory outside the source.
PROBE = """
import importlib.util, json, subprocess, sys
from importlib import resources
import rlm, rlm_sandbox, rlm.fixtures, rlm.prompts, rlm.view
from rlm._sandbox.early import child_env, zygote_argv
from rlm._traffic.prices import PriceTable
from rlm._trace_schema import load_schema
direct = subprocess.run([sys.executable, "-m", "rlm_sandbox", "--help"], env=child_env(),
                        cwd="/", capture_output=True, text=True)
print(json.dumps({
    "files": {m.__name__: m.__file__ for m in (rlm, rlm_sandbox, rlm.fixtures, rlm.prompts)},
    "generic": [n for n in ("sandbox", "fixtures", "prompts") if importlib.util.find_spec(n)],
    "system_prompt": rlm.prompts.load("system"),
    "samples": sorted(p.name for p in resources.files(rlm.fixtures).joinpath("samples").iterdir()),
    "assets": sorted(p.name for p in resources.files(rlm.view).joinpath("assets").iterdir()),
    "priced": PriceTable.default().lookup("gpt-4.1") is not None,
    "trace_schema": load_schema()["x-rlm-schema-version"],
    "zygote_flags": zygote_argv(3)[1:2],
    "direct_child": [direct.returncode, direct.stdout.split("[")[0]],
}))
"""


def _run(argv: list[str | Path], cwd: Path) -> str:
    done = subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True)
    assert done.returncode == 0, f"{argv}: {done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("source")
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for name in SOURCE:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, copy / name, ignore=ignore)
        else:
            shutil.copy2(ROOT / name, copy / name)
    return copy


@pytest.fixture(scope="module")
def wheel(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-index",
          "--no-build-isolation", "-w", out, source], cwd=out)
    (built,) = out.glob("rlm-*.whl")
    return built


def _fresh_venv(home: Path) -> tuple[Path, Path]:
    """A virtual environment without rlm that imports this one's dependencies: its python
    and its site-packages."""
    venv.create(home, with_pip=False, symlinks=True)
    python = home / "bin" / "python"
    where = _run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], home)
    purelib = Path(where.strip())
    deps = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    (purelib / "_deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    return python, purelib


def _pip_install(python: Path, *what: str | Path) -> None:
    # pip is this environment's (through _deps.pth); --ignore-installed: the rlm it sees
    # there is not the fresh environment's to replace.
    _run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
          "--no-build-isolation", "--ignore-installed", *what], cwd=python.parent)


def _source_files(source: Path) -> dict[str, bytes]:
    """Every file of the source folders, by the path it is installed at."""
    return {
        f"{installed}/{path.relative_to(source / folder).as_posix()}": path.read_bytes()
        for folder, installed in INSTALLED_AS.items()
        for path in (source / folder).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }


def test_the_wheel_holds_rlm_and_rlm_sandbox_and_every_source_file(
    wheel: Path, source: Path
) -> None:
    with zipfile.ZipFile(wheel) as built:
        names = built.namelist()
        (record,) = [n for n in names if n.endswith(".dist-info/RECORD")]
        recorded = [line.split(",")[0] for line in built.read(record).decode().splitlines()]
        info = record.rsplit("/", 1)[0]
        assert built.read(f"{info}/top_level.txt").decode().split() == ["rlm", "rlm_sandbox"]
        shipped = {n: built.read(n) for n in names if not n.startswith(info + "/")}
    assert sorted(recorded) == sorted(names)
    assert {n.split("/")[0] for n in names} == {"rlm", "rlm_sandbox", info}
    assert shipped == _source_files(source)


def _check_installed(python: Path, rlm_home: Path, work: Path) -> None:
    """Use the rlm that ``python`` imports as a user would, in ``work`` (made here, empty);
    its modules come from ``rlm_home``."""
    work.mkdir()
    found = json.loads(_run([python, "-c", PROBE], work))
    for module, file in found["files"].items():
        assert Path(file).is_relative_to(rlm_home), (module, file)
    assert found["generic"] == []
    prompts, fixtures = ROOT / "prompts/rlm/prompts", ROOT / "fixtures/rlm/fixtures"
    assert found["system_prompt"] == (prompts / "system.md").read_text(encoding="utf-8")
    assert found["samples"] == sorted(p.name for p in (fixtures / "samples").iterdir())
    assert found["assets"] == sorted(p.name for p in (ROOT / "rlm/view/assets").iterdir())
    assert found["priced"]
    assert found["trace_schema"] == TRACE_SCHEMA_VERSION  # the published schema ships
    # The zygote starts without site, given rlm_sandbox's folder; a direct sandbox with the
    # scrubbed environment finds it through site (an editable install's finder included).
    assert found["zygote_flags"] == ["-S"]
    assert found["direct_child"] == [0, "usage: python -m rlm_sandbox "]

    rlm = python.parent / "rlm"
    assert json.loads(_run([rlm, "doctor", "--json"], work))["zygote"] is True
    needle = generate_needle(20_000, seed=3)
    (work / "needle.txt").write_text(needle.text)
    answer = _run([rlm, "run", "What is the magic number?", "--context-file", "needle.txt",
                   "--provider", "fixture"], work)
    assert answer.strip() == needle.answer


def test_a_regular_install_ships_rlm_and_rlm_sandbox_only(wheel: Path, tmp_path: Path) -> None:
    python, purelib = _fresh_venv(tmp_path / "venv")
    _pip_install(python, wheel)
    assert {p.name for p in purelib.iterdir()} == {
        "rlm", "rlm_sandbox", wheel.name.split("-py3")[0] + ".dist-info", "_deps.pth"
    }
    _check_installed(python, purelib, tmp_path / "work")


def test_the_editable_install_the_readme_uses_works(source: Path, tmp_path: Path) -> None:
    python, _ = _fresh_venv(tmp_path / "venv")
    _pip_install(python, "-e", source)
    compileall.compile_dir(source, quiet=1)  # as pip does for a regular install
    _check_installed(python, source, tmp_path / "work")
