"""Rematerialization in one-program training steps: the ``grad`` pass recomputes cheap ops
in the backward from fewer saved values (min cut, transforms/grad.py), and ``joint``
keeps XLA from merging those recomputations back into the forward's copies
(``thunder.after``, transforms/joint.py, lowered in ir/hlo.py ``lower_after``); with the
same prim it keeps XLA from making a constant buffer the backward scatters into (an
embedding gradient's zeros) long before the scatter (``_late_constants``).

Oracle: eager PyTorch for the values; for the memory, XLA's own buffer assignment of the
same step compiled with the separation turned off. Nothing is timed.
"""

from __future__ import annotations

import copy

import pytest
import torch

import thunder_mlir
from thunder_mlir.runtime.plan import XlaStep
from thunder_mlir.transforms import joint
from conftest import mse_training_step

LAYERS, WIDTH, BATCH = 4, 256, 128


def _model(approximate: str = "tanh"):
    torch.manual_seed(0)
    blocks = []
    for _ in range(LAYERS):
        blocks += [torch.nn.Linear(WIDTH, 4 * WIDTH), torch.nn.GELU(approximate=approximate),
                   torch.nn.Linear(4 * WIDTH, WIDTH)]
    return torch.nn.Sequential(*blocks)


_step = mse_training_step


def _executable_after_steps(step, model, make_opt, batch):
    """The XLA executable of ``thunder_mlir.jit(step)`` after 3 steps of ``model``, each
    checked against eager's on a deep copy (the loss and every parameter within 1e-5).
    ``make_opt(model)``: its optimizer; ``batch(generator)``: one batch (a tuple)."""
    twin = copy.deepcopy(model)
    opt, opt2 = make_opt(model), make_opt(twin)
    g = torch.Generator().manual_seed(1)
    jstep = thunder_mlir.jit(step)
    for _ in range(3):
        b = batch(g)
        torch.testing.assert_close(jstep(model, opt, *b), step(twin, opt2, *b),
                                   rtol=1e-5, atol=1e-6)
        for p, q in zip(model.parameters(), twin.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    steps = [s for s in jstep._train._fn.last.plan.steps if type(s) is XlaStep]
    assert len(steps) == 1, "the step is one XLA program"
    return steps[0].executable


def _dense_batch(g):
    return torch.randn(BATCH, WIDTH, generator=g), torch.randn(BATCH, WIDTH, generator=g)


def _compiled_step(separate: bool, monkeypatch, approximate: str = "tanh"):
    """The step's XLA executable after 3 compiled steps, each checked against eager's;
    ``separate=False`` turns the separation off (every recomputation is left to XLA, as
    before joint separated them)."""
    if not separate:
        monkeypatch.setattr(joint, "_SEPARATE", False)
    return _executable_after_steps(
        _step, _model(approximate),
        lambda m: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9), _dense_batch)


def test_recomputation_is_not_merged_into_the_forward(monkeypatch):
    """Each layer's tanh runs three times: in the forward and, recomputed, twice in the
    backward: for the GELU output the weight-gradient dot reads, and for the GELU
    derivative (``_copy_per_reader``). XLA's CSE merged them all into one when they read
    the same saved value, keeping the GELU's intermediates alive from the forward to the
    backward."""
    exe = _compiled_step(True, monkeypatch)
    text = exe.hlo_modules()[0].to_string()
    assert text.count(" tanh(") == 3 * LAYERS, text.count(" tanh(")


def test_recomputation_lowers_the_step_memory(monkeypatch):
    """XLA's temporaries (activations, residuals, gradients) are smaller with the
    recomputation separated than without, by at least one GELU intermediate (BATCH x
    4 WIDTH floats, 512 KiB) per layer: what the backward recomputes is not kept from the
    forward (measured: 4.5 MiB against 8 MiB)."""
    separated = _compiled_step(True, monkeypatch).get_compiled_memory_stats().temp_size_in_bytes
    merged = _compiled_step(False, monkeypatch).get_compiled_memory_stats().temp_size_in_bytes
    print(f"XLA temporaries: separated {separated} B, merged {merged} B")
    assert separated <= merged - LAYERS * BATCH * 4 * WIDTH * 4, (separated, merged)



def _erf_buffers(exe) -> int:
    """How many of ``exe``'s fusions end in an erf: an erf XLA writes to a buffer of its
    own instead of fusing it into its readers."""
    return exe.hlo_modules()[0].to_string().count("ROOT %erf")


def test_recomputation_is_copied_per_reader(monkeypatch):
    """The exact GELU's ``erf`` is recomputed in the backward for two readers a dot apart:
    the GELU output (the weight-gradient dot's operand) and the GELU derivative. Shared,
    XLA made the erf a buffer of its own, alive between the two (it does not duplicate an
    expensive op into two fusions); copied per reader (``joint._copy_per_reader``), each
    copy fuses into its reader (measured: 4,609 KiB of temporaries against 4,736 KiB; the
    nanoGPT block of benchmarks/optimizer_step.py, whose peak is there: 13,316 against
    14,341 KiB)."""
    copied = _compiled_step(True, monkeypatch, "none")
    assert copied.hlo_modules()[0].to_string().count(" erf(") == 3 * LAYERS
    assert _erf_buffers(copied) == 0
    monkeypatch.setattr(joint, "_copy_per_reader", lambda bwd: {})
    shared = _compiled_step(True, monkeypatch, "none")
    assert _erf_buffers(shared) == LAYERS, "the baseline: one erf buffer per layer"
    c, s = (e.get_compiled_memory_stats().temp_size_in_bytes for e in (copied, shared))
    print(f"XLA temporaries: copied per reader {c} B, shared {s} B")
    assert c <= s, (c, s)


VOCAB, DIM = 1000, 128


def _embedding_step_memory(late: bool, monkeypatch) -> int:
    """XLA temporaries (bytes) of an embedding -> 2 x (Linear, tanh) -> vocabulary logits
    cross-entropy SGD step, after 3 compiled steps each checked against eager's;
    ``late=False`` leaves the embedding gradient's zeros to XLA's scheduler."""
    monkeypatch.setattr(joint, "_LATE_CONSTANT_BYTES", 16 << 10 if late else 1 << 60)

    def make():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Embedding(VOCAB, DIM),
                                   torch.nn.Linear(DIM, DIM), torch.nn.Tanh(),
                                   torch.nn.Linear(DIM, DIM), torch.nn.Tanh(),
                                   torch.nn.Linear(DIM, VOCAB))

    def step(model, opt, idx, y):
        loss = torch.nn.functional.cross_entropy(model(idx).reshape(-1, VOCAB), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    exe = _executable_after_steps(
        step, make(), lambda m: torch.optim.SGD(m.parameters(), lr=0.1),
        lambda g: tuple(torch.randint(0, VOCAB, (2, 64), generator=g) for _ in range(2)))
    return exe.get_compiled_memory_stats().temp_size_in_bytes


def test_scatter_base_is_made_late(monkeypatch):
    """The embedding gradient is index_add into zeros (VOCAB x DIM floats, 500 KiB). With
    no operands, XLA scheduled those zeros among the forward's first ops, alive through the
    whole step; made after the gradient they receive (joint ``_late_constants``), they are
    not alive at the step's peak (measured: 1,694 KiB against 2,194)."""
    late = _embedding_step_memory(True, monkeypatch)
    early = _embedding_step_memory(False, monkeypatch)
    print(f"XLA temporaries: zeros made late {late} B, left to XLA {early} B")
    assert late <= early - VOCAB * DIM * 4 * 3 // 4, (late, early)


def _norm_step_memory(monkeypatch, separate: bool) -> int:
    """XLA temporaries (bytes) of a 4-block pre-LayerNorm residual MLP SGD step (the
    transformer block's shape without attention), after 3 compiled steps each checked
    against eager's; ``separate=False`` lets the LayerNorm rule read its input directly."""
    from thunder_mlir.transforms import vjp_composites

    if not separate:
        monkeypatch.setattr(vjp_composites, "_recomputed_from", lambda x, g: x)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln = torch.nn.LayerNorm(WIDTH)
            self.fc = torch.nn.Linear(WIDTH, WIDTH)

        def forward(self, x):
            return x + self.fc(self.ln(x)).relu()

    torch.manual_seed(0)
    exe = _executable_after_steps(
        _step, torch.nn.Sequential(*[Block() for _ in range(LAYERS)]),
        lambda m: torch.optim.SGD(m.parameters(), lr=0.1), _dense_batch)
    return exe.get_compiled_memory_stats().temp_size_in_bytes


def test_norm_rule_recomputation_is_not_merged_into_the_forward(monkeypatch):
    """The LayerNorm VJP rule recomputes the statistics and the normalized input from the
    input (``vjp_composites._recomputed_from``). Read directly, XLA's CSE merged that with
    the forward's own LayerNorm, keeping its centered and normalized input (BATCH x WIDTH
    floats each, 128 KiB) alive from the forward to the backward (measured: 1,538 KiB of
    temporaries against 1,796 KiB)."""
    separate = _norm_step_memory(monkeypatch, True)
    merged = _norm_step_memory(monkeypatch, False)
    print(f"XLA temporaries: rule input made after the cotangent {separate} B, read "
          f"directly {merged} B")
    assert separate <= merged - 2 * BATCH * WIDTH * 4, (separate, merged)
