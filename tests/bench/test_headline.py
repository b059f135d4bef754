"""bench/headline.py: the README's benchmark table from a results file."""
from __future__ import annotations

from bench import headline


def _data():
    return {
        "meta": {"date": "2026-01-02T03:04:05", "quick": False},
        "machine": {"cpu": "Some CPU", "cores": 4, "python": "3.11.7"},
        "systems": {"tracejit_compiled": {"versions": {"tracejit": "0.1.0", "numba": "0.60.0"}},
                    "torch_eager": {"versions": {"torch": "2.13.0"}}},
        "results": {"mlp2": {"tracejit_eager": {"step_us": 211.4}, "tracejit_compiled": {"step_us": 150.0},
                             "torch_eager": {"step_us": 233.2}, "jax_jit": {"error": "boom"}},
                    "compile": {"tracejit_eager": {"skipped": "eager: nothing to compile"},
                                "tracejit_compiled": {"step_cold_ms": 494.1}}},
    }


def test_table_has_a_row_per_measure_and_a_column_per_system():
    lines = headline.table(_data()).splitlines()
    assert lines[0] == ("| median of the timed runs | tracejit eager | tracejit compiled | PyTorch eager "
                        "| torch.compile | jax.jit |")
    assert len(lines) == 2 + len(headline.ROWS)
    two_layer = next(line for line in lines if line.startswith("| Two-layer net training step"))
    assert two_layer.endswith("| 211 µs | 150 µs | 233 µs | – | – |")
    cold = next(line for line in lines if line.startswith("| Two-layer step, first call"))
    assert cold.endswith("| – | 494 ms | – | – | – |")
    gelu = next(line for line in lines if line.startswith("| GELU chain forward,"))
    assert gelu.endswith("| – | – | – | – | – |")


def test_caption_names_the_run_the_machine_and_the_file():
    cap = headline.caption(_data(), "bench/results/x.json")
    assert cap.startswith("`python -m bench`, full run of 2026-01-02 03:04:05 on Some CPU, 4 cores")
    assert "tracejit 0.1.0, numba 0.60.0, torch 2.13.0" in cap
    assert cap.endswith("[bench/results/x.json](bench/results/x.json).")
    assert headline.caption(_data(), "bench/results/x.json", link=False).endswith("`bench/results/x.json`.")
    quick = {**_data(), "meta": {"date": "d", "quick": True}}
    assert "quick run (`--quick`)" in headline.caption(quick, "p")
