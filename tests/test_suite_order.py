"""The suite's own machinery (tests/conftest.py, tests/projcopy.py): the modules it starts first
exist, and the shared smoke pretrain goes only where the same pretrain is planned."""
from pathlib import Path

import pytest
from test_crash_table import TINY

from conftest import LONGEST_FIRST
from projcopy import SMOKE, base_pretrain_sid, copy_pretrain, make_project


def test_every_module_the_suite_starts_first_exists():
    here = Path(__file__).parent
    assert [name for name in LONGEST_FIRST if not (here / name).is_file()] == []
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)


def test_the_shared_smoke_pretrain_is_not_copied_into_a_project_that_plans_another(tmp_path):
    built = make_project(tmp_path / "built", config=SMOKE)
    sid = base_pretrain_sid(built)
    (built / "results/_store/pretrain" / sid).mkdir(parents=True)
    (built / "built").write_text(sid, encoding="utf-8")
    other = make_project(tmp_path / "other", config=TINY)
    with pytest.raises(AssertionError, match="not the shared smoke one"):
        copy_pretrain(built, other)
    assert not (other / "results/_store/pretrain").exists()
