"""The second of the four parts of the ported programs (test_ported_programs.py lists
them and runs the first): PyTorch's losses, eager and compiled, from the same weights."""
import pytest

from test_ported_programs import check_compiled, check_eager, reference  # noqa: F401  (the fixture)

PART = 1
pytestmark = pytest.mark.long   # tests/conftest.py: started first


def test_programs_give_pytorchs_losses_eager(reference):
    check_eager(reference)


def test_compiled_programs_give_pytorchs_losses_in_bounded_compiles(reference):
    check_compiled(reference)
