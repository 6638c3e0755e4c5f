"""Issue 48: tensors held as plain attributes of a jitted module (litgpt's ``mask_cache``,
RoPE caches, a KV cache object's tensors, lists and dicts of tensors) are program inputs:
read afresh at every call, keyed by their metadata, written back where the program writes
them in place (frontend/module_attributes.py). Each case is compared with eager on a twin
of the module: outputs, and the module's tensors after every call, over calls with the
attribute reassigned or written between them. Tensors from globals and closures keep the
foreign-tensor error."""

from __future__ import annotations

import copy

import pytest
import torch

import thunder_mlir
from thunder_mlir import SharpEdgeError


def _same(a, e):
    torch.testing.assert_close(a, e)


def _twins(m):
    """(eager module, jitted copy of it, the copy's original)."""
    mine = copy.deepcopy(m)
    return m, thunder_mlir.jit(mine), mine


class Masked(torch.nn.Module):
    """litgpt's shape: a mask built by a method, held as a plain attribute."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.mask_cache = None

    def set_cache(self, n):
        self.mask_cache = torch.tril(torch.ones(n, n, dtype=torch.bool))[None, None]

    def forward(self, x, pos):
        mask = torch.index_select(self.mask_cache, 2, pos)
        return self.lin(x).masked_fill(~mask[0, 0, :, : x.shape[0]].any(-1)[:, None], 0.0)


def test_mask_cache_attribute_is_an_input_read_at_every_call():
    torch.manual_seed(0)
    e, j, mine = _twins(Masked())
    e.set_cache(8)
    mine.set_cache(8)
    x, pos = torch.randn(3, 4), torch.tensor([0, 1, 5])
    _same(j(x, pos), e(x, pos))
    # reassigned between calls, same metadata: the same program reads the new tensor
    for m in (e, mine):
        m.mask_cache = torch.zeros(1, 1, 8, 8, dtype=torch.bool)
    _same(j(x, pos), e(x, pos))
    assert thunder_mlir.cache_misses(j) == 1 and thunder_mlir.cache_hits(j) == 1
    # another shape: a new program
    e.set_cache(12)
    mine.set_cache(12)
    _same(j(x, pos), e(x, pos))
    assert thunder_mlir.cache_misses(j) == 2


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.count = torch.zeros(())
        self.buf = torch.zeros(4, 3)

    def forward(self, x, i):
        self.count.add_(1)
        self.buf.index_copy_(0, i, x)
        return self.buf.sum(0) * self.count


def test_in_place_writes_to_attributes_are_written_back():
    e, j, mine = _twins(Counter())
    for step in range(3):
        x, i = torch.full((1, 3), float(step + 1)), torch.tensor([step])
        _same(j(x, i), e(x, i))
        _same(mine.count, e.count)
        _same(mine.buf, e.buf)
    keep = mine.buf
    _same(j(torch.ones(1, 3), torch.tensor([3])), e(torch.ones(1, 3), torch.tensor([3])))
    assert mine.buf is keep  # written in place, as eager writes it
    # the caller writes between calls: the program reads it
    for m in (e, mine):
        m.count.fill_(10)
    _same(j(torch.ones(1, 3), torch.tensor([0])), e(torch.ones(1, 3), torch.tensor([0])))
    _same(mine.count, e.count)
    assert thunder_mlir.cache_misses(j) == 1



class _Steps(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.steps = torch.zeros(())  # neither parameter nor buffer, written in place

    def forward(self, x):
        self.steps.add_(1)
        return self.lin(x) * self.steps


class _SharedTwice(torch.nn.Module):
    """One submodule under two attribute names (peft's ``word_embeddings``), called
    through both."""

    def __init__(self):
        super().__init__()
        self.block = _Steps()
        self.alias = self.block

    def forward(self, x):
        return self.alias(self.block(x))


def test_attribute_of_a_submodule_reachable_under_two_names_is_one_input():
    """Lifted once, under the first name (not as two inputs over one tensor, which an
    in-place write through either name would make the program refuse)."""
    e, j, mine = _twins(_SharedTwice())
    for step in range(2):
        x = torch.full((1, 3), float(step + 1))
        _same(j(x), e(x))
        _same(mine.block.steps, e.block.steps)
    assert mine.block.steps.item() == 4 and thunder_mlir.cache_misses(j) == 1

class Containers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.caches = [torch.ones(2), torch.arange(2.0)]
        self.tables = {"a": torch.full((2,), 3.0), "b": (torch.ones(2), 2)}

    def forward(self, x):
        out = x
        for c in self.caches:
            out = out + c
        self.caches[0].mul_(2)
        a, (b, k) = self.tables["a"], self.tables["b"]
        return out * a + b * k


def test_lists_and_dicts_of_tensors():
    e, j, mine = _twins(Containers())
    x = torch.randn(2)
    _same(j(x), e(x))
    _same(mine.caches[0], e.caches[0])
    for m in (e, mine):  # an element replaced: read at the next call
        m.caches[1] = torch.full((2,), 7.0)
        m.tables["b"] = (torch.zeros(2), 2)
    _same(j(x), e(x))
    assert thunder_mlir.cache_misses(j) == 1
    for m in (e, mine):  # the list grows: the program's loop is traced again
        m.caches.append(torch.ones(2))
        m.tables["b"] = (torch.zeros(2), 5)  # a plain value: keyed by value
    _same(j(x), e(x))
    _same(mine.caches[0], e.caches[0])
    assert thunder_mlir.cache_misses(j) == 2


class KV:
    """A plain object holding tensors, held by the module (a KV cache object)."""

    def __init__(self, n):
        self.k = torch.zeros(n, 2)
        self.scale = 1.0


class WithKV(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Sequential(torch.nn.Identity())
        self.inner.kv = KV(4)

    def forward(self, x, pos):
        kv = self.inner[0] and self.inner.kv
        kv.k.index_copy_(0, pos, x)
        return kv.k.cumsum(0) * kv.scale


def test_tensors_of_an_object_held_by_a_submodule():
    e, j, mine = _twins(WithKV())
    for step in range(2):
        x, pos = torch.full((1, 2), step + 1.0), torch.tensor([step])
        _same(j(x, pos), e(x, pos))
        _same(mine.inner.kv.k, e.inner.kv.k)
    for m in (e, mine):  # a new object: its tensors are read
        m.inner.kv = KV(4)
        m.inner.kv.k += 5
    x, pos = torch.ones(1, 2), torch.tensor([3])
    _same(j(x, pos), e(x, pos))
    _same(mine.inner.kv.k, e.inner.kv.k)
    for m in (e, mine):
        m.inner.kv.scale = 3.0  # a plain attribute: guarded by value
    _same(j(x, pos), e(x, pos))


class ShapeOnly(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = torch.zeros(3, 5)

    def forward(self, x):
        return x * self.table.shape[-1]  # only the metadata steers the program


def test_metadata_read_of_an_attribute_is_keyed():
    e, j, mine = _twins(ShapeOnly())
    x = torch.ones(2)
    _same(j(x), e(x))
    for m in (e, mine):
        m.table = torch.zeros(3, 7)
    _same(j(x), e(x))  # not the stale 5


class NoneOrMask(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mask = None

    def forward(self, x):
        if self.mask is None:
            return x + 1
        return x.masked_fill(self.mask, 0.0)


def test_none_then_tensor():
    e, j, mine = _twins(NoneOrMask())
    x = torch.randn(3)
    _same(j(x), e(x))
    for m in (e, mine):
        m.mask = torch.tensor([True, False, True])
    _same(j(x), e(x))
    for m in (e, mine):
        m.mask = None
    _same(j(x), e(x))


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.full((3,), 2.0, requires_grad=True)  # not a Parameter

    def forward(self, x):
        return (x * self.scale).sum()


def test_attribute_that_requires_grad_gets_eager_gradient():
    e, j, mine = _twins(Scaled())
    x = torch.randn(3, requires_grad=True)
    xe = x.detach().clone().requires_grad_()
    j(x).backward()
    e(xe).backward()
    _same(mine.scale.grad, e.scale.grad)
    _same(x.grad, xe.grad)


class Rebinds(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mask = torch.ones(3)
        self.cache = None
        self.window = torch.arange(8.0)
        self.kv = KV(2)

    def forward(self, x):
        self.mask = self.mask * x  # a lifted attribute rebound
        self.cache = x[None] if self.cache is None else torch.cat([self.cache, x[None]])
        self.window = self.window[1:]  # a view of the attribute's tensor
        self.kv.k = self.kv.k + x[:2]  # on an object the module holds
        return self.mask.sum() + self.cache.sum() + self.window.sum()


def test_tensors_the_program_assigns_to_attributes_are_set_as_eager_sets_them():
    e, j, mine = _twins(Rebinds())
    for step in range(3):
        x = torch.arange(3.0) + step
        _same(j(x), e(x))
        for a, b in ((mine.mask, e.mask), (mine.cache, e.cache), (mine.window, e.window),
                     (mine.kv.k, e.kv.k)):
            _same(a, b)
    assert mine.window._base is not None  # eager's view of the tensor it was sliced from


W = torch.ones(2)


class Refused(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mask = torch.ones(3)
        self.items = [torch.ones(3)]

    def forward(self, x, which):
        if which == 0:
            x = x * self.mask
            self.mask = W  # a tensor from outside the program: refused
        else:
            self.items.append(x)
        return x


def test_what_cannot_be_replayed_on_attributes_is_refused_and_undone():
    m = Refused()
    j = thunder_mlir.jit(m)
    before = m.mask
    with pytest.raises(NotImplementedError, match="attribute 'mask'"):
        j(torch.ones(3), 0)
    assert m.mask is before
    with pytest.raises(NotImplementedError, match="modifies an input list"):
        j(torch.ones(3), 1)
    assert len(m.items) == 1


class SetsPlain(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mask = torch.ones(3)

    def forward(self, x):
        x = x * self.mask
        self.mask = None  # a plain value over a lifted attribute: set after each run
        return x


def test_a_plain_value_assigned_over_a_lifted_attribute_is_set_as_eager():
    e, j, mine = _twins(SetsPlain())
    x = torch.arange(3.0)
    _same(j(x), e(x))
    assert mine.mask is None and e.mask is None
    for m in (e, mine):
        m.mask = torch.full((3,), 2.0)
    _same(j(x), e(x))
    assert mine.mask is None


class Holder:
    def __init__(self):
        self.t = torch.ones(2)


HELD = Holder()


def test_globals_and_objects_reached_from_globals_stay_refused():
    class UsesGlobal(torch.nn.Module):
        def forward(self, x):
            return x * W

    class UsesGlobalObject(torch.nn.Module):
        def forward(self, x):
            return x * HELD.t

    for cls, name in ((UsesGlobal, "the global 'W'"), (UsesGlobalObject, "")):
        with pytest.raises(SharpEdgeError, match="held by the jitted module") as err:
            thunder_mlir.jit(cls())(torch.ones(2))
        assert name in str(err.value)


def test_jitted_method_lifts_attributes_too():
    torch.manual_seed(0)
    e, mine = Masked(), None
    mine = copy.deepcopy(e)
    e.set_cache(6)
    mine.set_cache(6)
    mine.forward = thunder_mlir.jit(mine.forward)
    x, pos = torch.randn(2, 4), torch.tensor([1, 4])
    _same(mine(x, pos), e(x, pos))


def test_thunder_module_forwards_attributes_to_the_original():
    m = Masked()
    j = thunder_mlir.jit(m)
    j.set_cache(5)  # a method of the original
    assert m.mask_cache.shape == (1, 1, 5, 5)
    assert j.mask_cache is m.mask_cache
    j.mask_cache = None  # an attribute of the original: assigned there
    assert m.mask_cache is None and "mask_cache" not in j.__dict__
    with pytest.raises(AttributeError):
        j.no_such_attribute  # noqa: B018


def test_thunder_module_keeps_its_own_attributes_where_the_original_has_them_too():
    class HasFn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self._fn, self._state = "user's", "user's"

        def forward(self, x):
            return x * 2

    m = HasFn()
    j = thunder_mlir.jit(m)
    assert m._fn == "user's" and m._state == "user's"
    j2 = copy.deepcopy(j)  # (no attribute lookup recursion while copying)
    for jm in (j, j2):
        _same(jm(torch.ones(2)), torch.full((2,), 2.0))


class InRegions(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.scale = torch.full((3,), 2.0)
        self.total = torch.zeros(3)

    def forward(self, x):
        y = torch.utils.checkpoint.checkpoint(lambda t: self.lin(t) * self.scale, x,
                                              use_reentrant=False)
        z = torch.cond(x.sum() > 0, lambda t: t * self.scale, lambda t: t - self.scale, (y,))
        self.total.add_(z.detach())
        return z


def test_attributes_read_inside_checkpoint_and_cond_regions():
    torch.manual_seed(0)
    e, j, mine = _twins(InRegions())
    for step, sign in enumerate((1.0, -1.0, 1.0)):
        x = (torch.rand(3) * sign).requires_grad_()
        xe = x.detach().clone().requires_grad_()
        a, b = j(x), e(xe)
        _same(a, b)
        a.sum().backward()
        b.sum().backward()
        _same(x.grad, xe.grad)
        _same(mine.lin.weight.grad, e.lin.weight.grad)
        _same(mine.total, e.total)
        for m in (e, mine):
            m.scale = torch.full((3,), step + 3.0)
    assert thunder_mlir.cache_misses(j) == 1


def test_a_written_attribute_passed_as_an_argument_too_is_refused_by_name_at_a_hit():
    class Writes(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("b", torch.zeros(3))
            self.a = torch.zeros(3)

        def forward(self, x, y=None):
            self.a.add_(1)
            self.b.add_(1)
            return x * 2

    m = Writes()
    j = thunder_mlir.jit(m)
    j(torch.ones(3), y=torch.ones(1))  # compiled; the calls below are cache hits
    for call, names in ((lambda: j(m.a, y=torch.ones(1)), ("attribute 'a'", "args[0]")),
                        (lambda: j(torch.ones(3), y=m.b), ("parameter or buffer 'b'",
                                                           "kwargs['y']"))):
        with pytest.raises(NotImplementedError, match="share memory") as err:
            call()
        assert all(n in str(err.value) for n in names), str(err.value)
    _same(m.a, torch.ones(3))  # nothing written by the refused calls


def test_a_new_object_holding_program_tensors_assigned_to_an_attribute_is_refused():
    class NewObject(torch.nn.Module):
        def forward(self, x):
            self.kv = KV(1)
            self.kv.k = x * 2
            return x

    m = NewObject()
    with pytest.raises(NotImplementedError, match="attribute 'kv'"):
        thunder_mlir.jit(m)(torch.ones(1, 2))
    assert not hasattr(m, "kv")
