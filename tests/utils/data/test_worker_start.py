"""How DataLoader workers start: spawn where the program can be spawned, fork where the
loading runs from a main script's top level outside an ``if __name__ == "__main__":`` guard
(spawn would run the whole program again in each worker), one op thread per worker."""
import os
import subprocess
import sys
import textwrap

import pytest

from tracejit.utils.data import _workers

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
pytestmark = pytest.mark.skipif("fork" not in __import__("multiprocessing").get_all_start_methods(),
                                reason="needs the fork start method")


def _run(tmp_path, body: str) -> str:
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(body))
    env = dict(os.environ, PYTHONPATH=REPO)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


_LOADER = """
    import tracejit as torch
    from tracejit.utils.data import DataLoader, Dataset, TensorDataset
    from tracejit.utils.data import _workers

    class Threads(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return torch.tensor([torch.get_num_threads()])
"""


def test_unguarded_script_forks_and_loads_a_large_dataset(tmp_path):
    # The dataset pickles to ~8 MB: spawning a worker that re-ran this script (and died at
    # its own DataLoader) left the parent writing to a pipe nobody read.
    out = _run(tmp_path, _LOADER + """
    data = torch.arange(4 * 200_000, dtype=torch.float64).reshape(200_000, 4)
    loader = DataLoader(TensorDataset(data, torch.arange(200_000)), batch_size=50_000, num_workers=3)

    def train():
        total = 0.0
        for x, y in loader:
            total += float(x[:, 0].sum()) + float(y.sum())
        return total

    print("METHOD", _workers.default_start_method())
    print("TOTAL", train(), train())
    print("THREADS", [int(b) for b in DataLoader(Threads(), batch_size=None, num_workers=2)])
    """)
    expect = float(sum(4 * i for i in range(200_000)) + sum(range(200_000)))
    assert "METHOD fork" in out
    assert f"TOTAL {expect} {expect}" in out
    assert "THREADS [1, 1, 1, 1]" in out


def test_guarded_script_keeps_spawn(tmp_path):
    out = _run(tmp_path, _LOADER + """
    def main():
        print("METHOD", _workers.default_start_method())
        print("THREADS", [int(b) for b in DataLoader(Threads(), batch_size=None, num_workers=2)])

    if __name__ == "__main__":
        main()
    """)
    assert "METHOD spawn" in out
    assert "THREADS [1, 1, 1, 1]" in out


@pytest.mark.parametrize("source, line, guarded", [
    ("x = 1\nif __name__ == '__main__':\n    run()\n", 3, True),
    ("x = 1\nif '__main__' == __name__:\n    run()\n", 3, True),
    ("for e in range(3):\n    run()\n", 2, False),
    ("if __name__ != '__main__':\n    run()\n", 2, False),
    ("if DEBUG:\n    run()\n", 2, False),
])
def test_guard_detection(tmp_path, source, line, guarded):
    path = tmp_path / "m.py"
    path.write_text(source)
    assert _workers._guarded(str(path), line) is guarded
