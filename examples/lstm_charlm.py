"""Next-character prediction with an LSTM on a text the standard library ships.

The default text is the Zen of Python (the ``this`` module stores it ROT13-encoded);
``--module NAME`` trains on a standard-library module's source instead (for instance
``--module textwrap``). Characters are embedded, run through ``nn.LSTM`` and a linear
head; the loss is cross-entropy of the next character. The script prints the loss
falling, then a greedy sample, and exits non-zero if the loss did not at least halve.

``--compile`` runs the model (embedding, the LSTM, the head) and the loss as one
``tj.script``-compiled function, forward and backward; the optimizer step stays eager.
The LSTM's time loop is one ``scan`` equation (``tj.jit.scan``), so the compiled program
holds one step whatever the sequence length.

Measured on a shared 2-core machine with OPENBLAS_NUM_THREADS=1 (30 steps): the same
losses step for step (3.435 -> 2.647); eager 0.50 s/step, compiled 0.19 s/step; the
first compiled call took 33 s with an empty kernel cache and 1.4 s with a warm one (it
was 133 s and 16 s when the loop was unrolled into the graph). 300 steps take the loss
to about 0.15. On a busy machine OpenBLAS's default threads made every matmul 10-50x
slower here; OPENBLAS_NUM_THREADS=1 avoids that.

Run:  python examples/lstm_charlm.py [--steps N] [--compile] [--module textwrap]
"""
from __future__ import annotations

import argparse
import codecs
import contextlib
import io
import inspect
import importlib
import sys
import time

import numpy as np

import tracejit as tj
from tracejit import nn, optim


def load_text(module: str | None) -> str:
    if module is None:
        with contextlib.redirect_stdout(io.StringIO()):   # importing `this` prints the Zen
            import this  # noqa: F401
        return codecs.decode(sys.modules["this"].s, "rot13")
    return inspect.getsource(importlib.import_module(module))


class CharLM(nn.Module):
    def __init__(self, vocab: int, emb: int = 32, hidden: int = 128, layers: int = 1):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb)
        self.rnn = nn.LSTM(emb, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, x):
        out, _ = self.rnn(self.embed(x))
        return self.head(out)


class Objective(nn.Module):
    """The model and its loss in one module, so --compile captures both in one graph."""

    def __init__(self, model: CharLM):
        super().__init__()
        self.model = model
        self.loss_fn = nn.CrossEntropyLoss()

    def forward(self, x, y):
        logits = self.model(x)
        return self.loss_fn(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def sample(model: CharLM, itos: list, start: str, stoi: dict, n: int = 120) -> str:
    """Greedy continuation of `start` (the whole prefix is re-run per character: simple, short)."""
    ids = [stoi[c] for c in start]
    model.eval()
    with tj.no_grad():
        for _ in range(n):
            logits = model(tj.tensor([ids[-64:]]))
            ids.append(int(logits[0, -1].argmax().item()))
    model.train()
    return "".join(itos[i] for i in ids)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seq-len", type=int, default=48)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--module", default=None, help="train on this stdlib module's source")
    ap.add_argument("--compile", action="store_true", help="tj.script the model and loss")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    text = load_text(args.module)
    itos = sorted(set(text))
    stoi = {c: i for i, c in enumerate(itos)}
    data = np.array([stoi[c] for c in text], dtype=np.int64)
    print(f"text: {len(text)} characters, {len(itos)} distinct")

    tj.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    model = CharLM(len(itos), hidden=args.hidden)
    objective = Objective(model)
    step_fn = tj.script(objective) if args.compile else objective
    opt = optim.Adam(model.parameters(), lr=3e-3)

    L = args.seq_len
    losses = []
    t0 = time.perf_counter()
    for step in range(1, args.steps + 1):
        starts = rng.integers(0, len(data) - L - 1, args.batch)
        windows = np.stack([data[s:s + L + 1] for s in starts])
        x, y = tj.tensor(windows[:, :-1]), tj.tensor(windows[:, 1:])
        loss = step_fn(x, y)
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if step == 1 or step % 25 == 0:
            recent = np.mean(losses[-25:])
            print(f"step {step:4d}  loss {recent:.3f}  ({time.perf_counter() - t0:.1f} s)", flush=True)
    first, last = np.mean(losses[:10]), np.mean(losses[-10:])
    print(f"loss {first:.3f} -> {last:.3f} in {args.steps} steps "
          f"({time.perf_counter() - t0:.1f} s{', compiled' if args.compile else ''})")
    print("sample:", repr(sample(model, itos, text[:20], stoi)))
    if not last < 0.5 * first:
        print("FAIL: the loss did not halve")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
