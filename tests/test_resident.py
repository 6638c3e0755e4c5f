"""Resident written inputs (thunder_mlir/runtime/resident.py): a compiled training step's
parameters and optimizer state live in XLA's memory and are donated to each run, which
computes their new values into that same memory.

Oracle: the same step run eagerly on a copy. Besides values, what makes the mechanism
observable is checked against eager: memory shared with a parameter (a view, a
``.detach()``, a numpy array, a storage object, a ``state_dict()``) sees every update, as
an eager in-place write's; ``data_ptr()`` stays fixed after the first step; the memory goes
with the tensors.
"""

from __future__ import annotations

import copy
import gc
import io
import random

import pytest
import torch

import thunder_mlir
from thunder_mlir.runtime import resident
from conftest import mse_training_step


def _models():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.Tanh(), torch.nn.Linear(12, 3))
    m2 = copy.deepcopy(m)
    return m, m2, torch.optim.AdamW(m.parameters(), lr=0.01), \
        torch.optim.AdamW(m2.parameters(), lr=0.01)


_step = mse_training_step


def _same(m, m2, o, o2):
    for p, q in zip(m.parameters(), m2.parameters()):
        torch.testing.assert_close(q, p, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(o2.state_dict(), o.state_dict(), atol=1e-5, rtol=1e-5)


def _addresses(m, o):
    return [p.data_ptr() for p in m.parameters()] + \
        [t.data_ptr() for s in o.state.values() for t in s.values() if t.dim()]


def test_parameters_and_state_updated_in_their_memory():
    """After the first step (which moves each parameter and state tensor into XLA's
    memory), every later step writes them where they are: no address changes, values as
    eager's, versions advance; the storages serialize and deep-copy."""
    m, m2, o, o2 = _models()
    jstep = thunder_mlir.jit(_step)
    torch.manual_seed(1)
    batches = [(torch.randn(5, 6), torch.randn(5, 3)) for _ in range(6)]
    _step(m, o, *batches[0])
    jstep(m2, o2, *batches[0])
    first = _addresses(m2, o2)
    assert len(first) == 12
    assert all(t in resident._RESIDENT for t in m2.parameters())
    versions = [p._version for p in m2.parameters()]
    for x, y in batches[1:]:
        _step(m, o, x, y)
        jstep(m2, o2, x, y)
        assert _addresses(m2, o2) == first
        _same(m, m2, o, o2)
    assert all(p._version > v for p, v in zip(m2.parameters(), versions))
    stage = [s for s in thunder_mlir.last_traces(jstep) if s.name == "xla-compile"][-1]
    assert "resident, donated" in stage.text, stage.text[-300:]
    buf = io.BytesIO()
    torch.save(m2.state_dict(), buf)
    buf.seek(0)
    torch.testing.assert_close(torch.load(buf), m2.state_dict())
    torch.testing.assert_close(copy.deepcopy(m2).state_dict(), m2.state_dict())


_HOLDERS = {  # what holds a parameter's memory, and its value as a tensor
    "view": (lambda p: p[0], lambda h: h),
    "detach": (lambda p: p.detach(), lambda h: h),
    "numpy": (lambda p: p.detach().numpy(), torch.from_numpy),
    "storage": (lambda p: (p.untyped_storage(), p.shape, p.dtype),
                lambda h: torch.empty(0, dtype=h[2]).set_(h[0]).view(h[1])),
    "state_dict": (lambda p: p, lambda h: h),  # (filled by the action: module state_dict)
}


@pytest.mark.parametrize("seed", range(6))
def test_holders_of_parameter_memory_see_every_update(seed):
    """A generator of 30 steps with random actions between them, mirrored on an eager
    copy: take a holder of a parameter's memory (each kind of ``_HOLDERS``, a module or
    optimizer ``state_dict()``), drop one, write a parameter in place eagerly, replace a
    parameter's ``.data``, reload the optimizer's state. After each step every held object
    equals its eager twin and the parameters and state equal eager's. It fails when a
    donated buffer's memory is reused while held (PJRT's refusal not honoured), when a
    parameter moves while something holds its old memory, or when a resident parameter's
    version is not advanced."""
    rng = random.Random(seed)
    m, m2, o, o2 = _models()
    jstep = thunder_mlir.jit(_step)
    torch.manual_seed(seed)
    held = []  # (kind, eager holder, compiled holder)
    for i in range(30):
        x, y = torch.randn(5, 6), torch.randn(5, 3)
        for _ in range(rng.randrange(3)):
            action = rng.choice(["hold", "hold", "drop", "write", "data", "reload"])
            k = rng.randrange(4)
            p, q = list(m.parameters())[k], list(m2.parameters())[k]
            if action == "hold":
                kind = rng.choice([*_HOLDERS, "module_state_dict", "opt_state_dict"])
                if kind == "module_state_dict":
                    held.append((kind, m.state_dict(), m2.state_dict()))
                elif kind == "opt_state_dict":
                    held.append((kind, o.state_dict(), o2.state_dict()))
                else:
                    make = _HOLDERS[kind][0]
                    held.append((kind, make(p), make(q)))
            elif action == "drop" and held:
                held.pop(rng.randrange(len(held)))
            elif action == "write":
                with torch.no_grad():
                    p.mul_(0.9)
                    q.mul_(0.9)
            elif action == "data":
                p.data = p.data.clone()
                q.data = q.data.clone()
            elif action == "reload":
                o.load_state_dict(copy.deepcopy(o.state_dict()))
                o2.load_state_dict(copy.deepcopy(o2.state_dict()))
        torch.testing.assert_close(jstep(m2, o2, x, y), _step(m, o, x, y).detach(),
                                   atol=1e-5, rtol=1e-5)
        _same(m, m2, o, o2)
        for kind, h, h2 in held:
            if kind in _HOLDERS:
                value = _HOLDERS[kind][1]
                torch.testing.assert_close(value(h2), value(h), atol=1e-5, rtol=1e-5,
                                           msg=f"step {i}: {kind}")
            else:
                torch.testing.assert_close(h2, h, atol=1e-5, rtol=1e-5, msg=f"step {i}: {kind}")


@pytest.mark.parametrize("kind", ["view", "detach", "numpy", "storage"])
def test_memory_held_before_the_first_step_is_not_moved(kind):
    """A parameter whose memory something holds at the first step does not move into XLA's
    memory (the holder would stop seeing the updates eager makes through it): it is written
    back by copy while held, the holder sees every step, and it moves once the holder is
    dropped."""
    m, m2, o, o2 = _models()
    jstep = thunder_mlir.jit(_step)
    make, value = _HOLDERS[kind]
    p, q = m[0].weight, m2[0].weight
    h, h2 = make(p), make(q)
    address = q.data_ptr()
    torch.manual_seed(2)
    for i in range(6):
        if i == 3:
            del h, h2
        x, y = torch.randn(5, 6), torch.randn(5, 3)
        _step(m, o, x, y)
        jstep(m2, o2, x, y)
        _same(m, m2, o, o2)
        if i < 3:
            assert q.data_ptr() == address
            torch.testing.assert_close(value(h2), value(h), atol=1e-5, rtol=1e-5)
    assert q.data_ptr() != address and q in resident._RESIDENT


def test_compiled_evaluation_between_steps():
    """A jitted model evaluated between compiled steps (a training loop's periodic eval)
    imports the resident parameters at each call and keeps no import (a kept one would
    hold their buffers, and the steps would copy): the steps still compute in the
    parameters' memory (addresses fixed, the program's results aliased), the evaluations
    and the training stay as eager's, and each evaluation sees the last step's values."""
    m, m2, o, o2 = _models()
    jstep, jeval = thunder_mlir.jit(_step), thunder_mlir.jit(m2)
    torch.manual_seed(3)
    probe = torch.randn(4, 6)
    first = None
    for k in range(5):
        x, y = torch.randn(5, 6), torch.randn(5, 3)
        _step(m, o, x, y)
        held = [resident._RESIDENT.get(p)[1] for p in m2.parameters()] if k else []
        jstep(m2, o2, x, y)
        # each parameter's buffer of the last step was donated to this one (a run on a
        # copy leaves it alive), and the new value is in the same memory
        assert all(a.is_deleted() for a in held), "the step ran on copies"
        first = first or _addresses(m2, o2)
        assert _addresses(m2, o2) == first, "a step after an evaluation moved memory"
        with torch.no_grad():
            torch.testing.assert_close(jeval(probe), m(probe), atol=1e-5, rtol=1e-5)
        _same(m, m2, o, o2)


def test_memory_goes_with_the_tensors():
    """The residency table holds a tensor's XLA buffer only while the tensor lives (the
    jitted step keeps its last model and optimizer: it goes too)."""
    m, m2, o, o2 = _models()
    jstep = thunder_mlir.jit(_step)
    jstep(m2, o2, torch.randn(5, 6), torch.randn(5, 3))
    gc.collect()  # (what earlier tests left)
    before = len(resident._RESIDENT)
    assert all(p in resident._RESIDENT for p in m2.parameters())
    del m2, o2, jstep
    gc.collect()
    assert len(resident._RESIDENT) == before - 12


class _Embed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)
        self.out = torch.nn.Linear(4, 2)

    def forward(self, ids):
        return self.out(self.emb(ids)).sum(1)


def test_failed_index_check_leaves_parameters_and_state_as_before():
    """An out-of-range token id: eager's embedding raises before anything is written. The
    resident parameters are donated to the run, so the program itself keeps their old
    values unless every check held (runtime_checks.unless_failed): after the IndexError
    they and the optimizer state are as before, and the steps after it match eager."""
    torch.manual_seed(0)
    m = _Embed()
    m2 = copy.deepcopy(m)
    o, o2 = torch.optim.Adam(m.parameters(), lr=0.1), torch.optim.Adam(m2.parameters(), lr=0.1)
    step = _step
    jstep = thunder_mlir.jit(step)
    for i in range(5):
        ids, y = torch.randint(0, 10, (3, 4)), torch.randn(3, 2)
        if i == 2:
            ids[1, 2] = 10
            before = copy.deepcopy((m2.state_dict(), o2.state_dict()))
            with pytest.raises(IndexError):
                step(m, o, ids, y)
            with pytest.raises(IndexError):
                jstep(m2, o2, ids, y)
            torch.testing.assert_close((m2.state_dict(), o2.state_dict()), before)
            continue
        torch.testing.assert_close(jstep(m2, o2, ids, y), step(m, o, ids, y).detach())
        _same(m, m2, o, o2)
    assert all(p in resident._RESIDENT for p in m2.parameters())


@pytest.mark.parametrize("kind", ["view", "detach", "numpy", "storage", "state_dict"])
def test_steps_donate_while_the_memory_is_held(kind):
    """Holders of a resident parameter's memory taken after its first step (a view,
    ``.detach()``, numpy array, storage object, module ``state_dict()``) do not stop the
    donation: the storage made from XLA's buffer is no PJRT export, so each step's old
    array is deleted (donated), the address stays, and the holder sees every step's value
    in place, as eager's holder does. It fails if a holder makes PJRT run on a copy, or
    if the memory moves."""
    m, m2, o, o2 = _models()
    jstep = thunder_mlir.jit(_step)
    torch.manual_seed(4)
    x, y = torch.randn(5, 6), torch.randn(5, 3)
    _step(m, o, x, y)
    jstep(m2, o2, x, y)
    p, q = m[0].weight, m2[0].weight
    if kind == "state_dict":
        h, h2 = m.state_dict()["0.weight"], m2.state_dict()["0.weight"]
        value = _HOLDERS["detach"][1]
    else:
        make, value = _HOLDERS[kind]
        h, h2 = make(p), make(q)
    address = q.data_ptr()
    for _ in range(4):
        x, y = torch.randn(5, 6), torch.randn(5, 3)
        old = resident._RESIDENT.get(q)[1]
        _step(m, o, x, y)
        jstep(m2, o2, x, y)
        assert old.is_deleted(), "the step ran on a copy"
        assert q.data_ptr() == address
        torch.testing.assert_close(value(h2), value(h), atol=1e-5, rtol=1e-5)
        _same(m, m2, o, o2)


class _WithBuffer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 3)
        self.register_buffer("shift", torch.randn(3))

    def forward(self, x):
        return self.lin(x) + self.shift


def test_read_only_arguments_are_imported_once(monkeypatch):
    """A step's read-only arguments passed again unchanged (a module buffer, the same
    batch tensors) keep their XLA buffer across calls: only the tensors new at each call
    are imported (the optimizer's scalar table, one per parameter group). It fails when the
    import cache leaves out positions the executable does not donate."""
    from thunder_mlir.runtime import dlpack

    torch.manual_seed(0)
    m = _WithBuffer()
    o = torch.optim.AdamW(m.parameters(), lr=0.01)
    m_ref = copy.deepcopy(m)
    o_ref = torch.optim.AdamW(m_ref.parameters(), lr=0.01)
    jstep = thunder_mlir.jit(_step)
    x, y = torch.randn(5, 6), torch.randn(5, 3)
    for _ in range(3):
        jstep(m, o, x, y)
        _step(m_ref, o_ref, x, y)
    imported = []
    real = dlpack.to_xla
    monkeypatch.setattr(dlpack, "to_xla", lambda t, d: imported.append(t.shape) or real(t, d))
    jstep(m, o, x, y)
    _step(m_ref, o_ref, x, y)
    assert len(imported) == len(o.param_groups), imported
    _same(m_ref, m, o_ref, o)
    torch.testing.assert_close(m.shift, m_ref.shift)


class _Cache(torch.nn.Module):
    """A static KV cache written one position per step (transformers' ``StaticLayer``:
    ``keys.index_copy_(2, cache_position, k)``), read by the step's output."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("keys", torch.zeros(2, 3, 8, 4))

    def forward(self, x, pos):
        k = self.lin(x)
        self.keys.index_copy_(2, pos, k.detach().unsqueeze(2))
        return (self.keys.sum(2) * k).sum(1)


def test_failed_index_check_leaves_a_cache_written_in_place_as_before():
    """A one-position ``index_copy_`` into a resident buffer is a dynamic-update-slice
    (scatter._copy_one_index), which clamps a start out of range where eager raises. On the
    CPU the written buffer is guarded by the index check (Target.guard_writes): at each of
    the first, a middle and the last positions it equals eager's, and a position out of
    range (8, and -1: eager refuses negative indices) raises eager's IndexError and leaves
    the cache and the parameters as before, the steps after it as eager's."""
    torch.manual_seed(0)
    m = _Cache()
    m2 = copy.deepcopy(m)
    o, o2 = torch.optim.SGD(m.parameters(), lr=0.1), torch.optim.SGD(m2.parameters(), lr=0.1)

    def step(model, opt, x, pos):
        loss = model(x, pos).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    jstep = thunder_mlir.jit(step)
    for p in (0, 8, 3, -1, 7):
        x, pos = torch.randn(2, 3, 4), torch.tensor([p])
        if not 0 <= p < 8:
            before = copy.deepcopy(m2.state_dict())
            with pytest.raises(IndexError):
                step(m, o, x, pos)
            with pytest.raises(IndexError):
                jstep(m2, o2, x, pos)
            torch.testing.assert_close(m2.state_dict(), before)
            continue
        torch.testing.assert_close(jstep(m2, o2, x, pos), step(m, o, x, pos).detach())
        torch.testing.assert_close(m2.state_dict(), m.state_dict())
    assert m2.keys in resident._RESIDENT


def test_gpu_cache_write_is_one_position_in_place():
    """Compiled for an H100 without a device: a KV-cache write is a dynamic-update-slice of
    one position on the cache, which is aliased with its new value (nothing copied back),
    and no select reads and writes the whole cache: on a GPU a failed index check is a
    device-side assert (Target.guard_writes), so the written cache is not guarded."""
    from thunder_mlir import pipeline

    class Decode(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("keys", torch.zeros(2, 3, 16, 8, dtype=torch.bfloat16))

        def forward(self, k, pos):
            self.keys.index_copy_(2, pos, k)
            return self.keys.float().sum(2)

    target = pipeline.Target(torch.device("cuda", 0), "NVIDIA H100 80GB HBM3")
    with pipeline.compile_only(target):
        with pytest.raises(pipeline.ProgramsCaptured) as info:
            thunder_mlir.jit(Decode().to("meta"))(
                torch.zeros(2, 3, 1, 8, dtype=torch.bfloat16, device="meta"),
                torch.zeros(1, dtype=torch.int64, device="meta"))
    captured = info.value
    (program,) = captured.programs
    text = "\n".join(t for _, t in program.regions)
    assert "stablehlo.dynamic_update_slice" in text
    assert not [line for line in text.splitlines()
                if "stablehlo.select" in line and "2x3x16x8xbf16" in line]
    assert captured.write_back_bytes == 0
    xla = {s.name: s for s in captured.stages}["xla-compile"].text
    assert "kept where an index check failed: off" in xla
