"""A broken engine fails the nox session that installed it, instead of turning into a skip.

``tests/shared/session_requires.require`` replaces module-level ``pytest.importorskip``
in the backend test folders: a module the session declares in ``GENLM_TEST_INSTALLED``
must import. Shown here with a stand-in engine that is installed but imports a
dependency the install lacks: ``pytest.importorskip`` turns that ``ModuleNotFoundError``
into a skip, as if the engine were absent.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from session_requires import ENV, declared, require

SHARED = Path(__file__).resolve().parents[1] / "shared"
BROKEN = "import fake_engine_dependency  # not installed: the install is broken\n"
TEST_MODULE = (
    "from session_requires import require\n"
    "require('fake_engine', reason='fake-engine is not installed')\n"
    "def test_uses_the_engine():\n"
    "    assert True\n"
)


@pytest.fixture
def broken_engine(tmp_path, monkeypatch):
    (tmp_path / "fake_engine").mkdir()
    (tmp_path / "fake_engine" / "__init__.py").write_text(BROKEN)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_declared_and_broken_raises(broken_engine, monkeypatch):
    monkeypatch.setenv(ENV, "genlm_hf, fake_engine")
    assert declared() == {"genlm_hf", "fake_engine"}
    with pytest.raises(ModuleNotFoundError, match="fake_engine_dependency"):
        require("fake_engine.sub", reason="fake-engine is not installed")


def test_not_declared_skips_with_the_reason(broken_engine, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="fake-engine is not installed"):
        require("fake_engine", reason="fake-engine is not installed")


def test_declared_and_working_returns_the_module(monkeypatch):
    monkeypatch.setenv(ENV, "json")
    assert require("json", reason="-").dumps([1]) == "[1]"


@pytest.mark.parametrize(
    "listed, outcome, code",
    [("fake_engine", "1 error", 2), ("", "1 skipped", 5)],  # 5: the one module skipped whole
)
def test_a_pytest_run_fails_only_when_the_session_installed_it(
    broken_engine, listed, outcome, code
):
    (broken_engine / "test_engine.py").write_text(TEST_MODULE)
    env = {
        **os.environ,
        ENV: listed,
        "PYTHONPATH": os.pathsep.join([str(SHARED), str(broken_engine)]),
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--rootdir",
            str(broken_engine),
            str(broken_engine / "test_engine.py"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=broken_engine,
    )
    assert outcome in proc.stdout, proc.stdout
    assert proc.returncode == code, proc.stdout
