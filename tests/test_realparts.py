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
