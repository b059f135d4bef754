"""``a + b`` of datasets, against PyTorch: map-style datasets concatenate, streams chain,
and ConcatDataset refuses a stream by name."""
import pytest

import tracejit as tj

torch = pytest.importorskip("torch")


def _stream(m, items):
    class Stream(m.utils.data.IterableDataset):
        def __iter__(self):
            return iter(items)
    return Stream()


def test_adding_streams_chains_them_as_torch():
    got = []
    for m in (torch, tj):
        both = _stream(m, [1, 2]) + _stream(m, [3])
        got.append((type(both).__name__, list(both), [b.tolist() for b in m.utils.data.DataLoader(both, batch_size=2)]))
    assert got[1] == got[0]


def test_adding_map_datasets_concatenates_them_as_torch():
    got = []
    for m in (torch, tj):
        both = m.utils.data.TensorDataset(m.arange(2)) + m.utils.data.TensorDataset(m.arange(3) + 10)
        got.append((type(both).__name__, len(both), [both[i][0].item() for i in range(len(both))]))
    assert got[1] == got[0]


def test_concat_dataset_refuses_a_stream_by_name():
    with pytest.raises(TypeError, match="dataset 1 is a Stream"):
        tj.utils.data.ConcatDataset([tj.utils.data.TensorDataset(tj.arange(2)), _stream(tj, [1])])
