"""The second half of the compiled public programs (test_ported_programs.py lists them and
checks the first half): PyTorch's losses from the same weights, in bounded captures."""
import pytest

from test_ported_programs import COMPILED, HALF, _run, check_compiled

pytest.importorskip("torch")


def test_second_half_of_compiled_programs_give_pytorchs_losses(tmp_path):
    programs = COMPILED[HALF:]
    weights = str(tmp_path)
    check_compiled(weights, _run("torch", "eager", weights, programs), programs)
