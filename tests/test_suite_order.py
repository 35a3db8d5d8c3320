"""The suite's own schedule (tests/conftest.py): the modules it starts first are modules that exist."""
from pathlib import Path

from conftest import LONGEST_FIRST


def test_every_module_the_suite_starts_first_exists():
    here = Path(__file__).parent
    assert [name for name in LONGEST_FIRST if not (here / name).is_file()] == []
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
