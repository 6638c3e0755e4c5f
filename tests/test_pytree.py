"""Pytree inputs and outputs: containers in and out, Python values as specialized inputs,
torch.Size, torch.return_types, and the error for an unsupported input type."""

from __future__ import annotations

import collections
import dataclasses

import pytest
import torch

import thunder_mlir
from conftest import assert_close_to_eager, assert_same_tree


def test_nested_containers_in_and_out():
    def fn(inp, *, scale):
        a, (b, c) = inp["pair"], inp["list"]
        d = inp["dict"]["deep"][0]
        return {"sum": a + b, "items": [c * scale, (d - a, None)], "nested": {"x": (a,)}}

    x = {"pair": torch.randn(3), "list": [torch.randn(3), torch.randn(3)],
         "dict": {"deep": (torch.randn(3),)}}
    assert_close_to_eager(lambda i: fn(i, scale=2.0), x)
    jfn = thunder_mlir.jit(fn)
    assert_same_tree(jfn(x, scale=2.0), fn(x, scale=2.0))


def test_list_and_tuple_outputs_keep_their_type():
    jfn = assert_close_to_eager(lambda a: ([a, a + 1], (a * 2,), [[a.sum()]]), torch.randn(2))
    out = jfn(torch.randn(2))
    assert type(out) is tuple and type(out[0]) is list and type(out[1]) is tuple


def test_none_inputs_and_outputs():
    def fn(a, b=None, c=None):
        out = a if b is None else a + b
        return out, None, c

    x, y = torch.randn(3), torch.randn(3)
    assert_close_to_eager(fn, x)
    assert_close_to_eager(fn, x, y)
    assert_close_to_eager(lambda a: fn(a, None, None), x)


def test_python_values_are_specialized_inputs():
    def fn(x, n, f, flag, name, dtype, sl, dev):
        y = x[sl] * n + f
        if flag:
            y = -y
        if name == "double":
            y = y * 2
        return y.to(dtype).to(dev), n * f, name + "!"

    x = torch.randn(6, 3)
    jfn = thunder_mlir.jit(fn)
    cases = [(3, 0.5, True, "double", torch.float64, slice(1, None, 2), "cpu"),
             (2, 0.5, True, "double", torch.float64, slice(1, None, 2), "cpu"),
             (3, 0.5, False, "single", torch.float16, slice(None, 2), torch.device("cpu")),
             (3, 0.5, False, "single", torch.int32, slice(None, 2), "cpu")]
    for c in cases:
        assert_close_to_eager(fn, x, *c, jfn=jfn)
    assert thunder_mlir.cache_misses(jfn) == len(cases)
    assert_close_to_eager(fn, x, *cases[0], jfn=jfn)
    assert thunder_mlir.cache_misses(jfn) == len(cases)


def test_ellipsis_and_complex_number_inputs():
    assert_close_to_eager(lambda x, ix: x[ix], torch.randn(2, 3), (Ellipsis, 1))
    assert_close_to_eager(lambda x, ix: x[ix], torch.randn(2, 3), (0, slice(None, None, 2)))


def test_torch_size_input():
    x = torch.randn(6)
    jfn = assert_close_to_eager(lambda a, s: a.reshape(s), x, torch.Size([2, 3]))
    assert jfn(x, torch.Size([3, 2])).shape == (3, 2)


def test_torch_size_and_metadata_outputs():
    jfn = assert_close_to_eager(lambda a: (a + 1, a.shape[0], a.dtype, a.dim()), torch.randn(6, 2))
    assert jfn(torch.randn(6, 2))[1:] == (6, torch.float32, 2)


def test_torch_size_output_type():
    jfn = thunder_mlir.jit(lambda a: (a.shape, [a.shape[1:], a * 2]))
    out = jfn(torch.randn(6, 2))
    assert type(out[0]) is torch.Size and out[0] == (6, 2)
    assert type(out[1][0]) is torch.Size and out[1][0] == (2,)


def test_return_types_namedtuple_output():
    x = torch.randn(3, 4)
    jfn = assert_close_to_eager(lambda a: torch.max(a, 1), x)
    out = jfn(x)
    assert isinstance(out, torch.return_types.max)
    torch.testing.assert_close(out.values, x.max(1).values)
    torch.testing.assert_close(out.indices, x.max(1).indices)
    values, indices = thunder_mlir.jit(lambda a: a.min(dim=0))(x)
    torch.testing.assert_close(indices, x.min(dim=0).indices)


def test_namedtuple_input_and_output():
    Pair = collections.namedtuple("Pair", "a b")

    def fn(p):
        return Pair(p.a + p.b, p.a * p.b)

    p = Pair(torch.randn(3), torch.randn(3))
    out = thunder_mlir.jit(fn)(p)
    assert type(out) is Pair
    torch.testing.assert_close(out.a, p.a + p.b)
    torch.testing.assert_close(out.b, p.a * p.b)


def test_same_tensor_passed_twice():
    x = torch.randn(4)
    assert_close_to_eager(lambda a, b: a * b + a, x, x)


def test_output_is_an_input():
    x = torch.randn(4)
    jfn = thunder_mlir.jit(lambda a, b: (a, b + 1))
    out = jfn(x, x)
    torch.testing.assert_close(out[0], x)
    torch.testing.assert_close(out[1], x + 1)


def test_dict_keys_order_and_kwargs():
    def fn(a, *, opts):
        return {k: a * v for k, v in opts.items()}

    x = torch.randn(3)
    jfn = thunder_mlir.jit(fn)
    assert_same_tree(jfn(x, opts={"b": 2.0, "a": 3.0}), fn(x, opts={"b": 2.0, "a": 3.0}))
    assert_same_tree(jfn(x, opts={"a": 1.0}), fn(x, opts={"a": 1.0}))


class Opaque:
    """State outside a __dict__ (slots): not an object thunder_mlir can key and copy."""

    __slots__ = ("a",)


@pytest.mark.parametrize("bad, type_name", [
    (Opaque(), "Opaque"),
    (object(), "object"),
    ({1, 2}, "set"),
    (b"bytes", "bytes"),
], ids=["user_class", "object", "set", "bytes"])
def test_unsupported_input_type_raises_value_error(bad, type_name):
    jfn = thunder_mlir.jit(lambda x, y: x + 1)
    with pytest.raises(thunder_mlir.UnsupportedInputError, match=type_name) as info:
        jfn(torch.randn(2), bad)
    assert isinstance(info.value, ValueError)


def test_unsupported_input_nested_names_its_path():
    jfn = thunder_mlir.jit(lambda d: d["t"] + 1)
    with pytest.raises(ValueError, match="Opaque") as info:
        jfn({"t": torch.randn(2), "o": [Opaque()]})
    assert "'o'" in str(info.value)


# ------------------------------------------------ objects and registered nodes as inputs
@dataclasses.dataclass
class Affine:
    weight: torch.Tensor
    bias: torch.Tensor
    scale: float
    act: str = "relu"


def _affine(p: Affine, x):
    y = (x @ p.weight + p.bias) * p.scale
    return torch.relu(y) if p.act == "relu" else torch.tanh(y)


def test_dataclass_input_python_fields_are_keyed():
    jfn = thunder_mlir.jit(_affine)
    p, x = Affine(torch.randn(3, 2), torch.randn(2), 2.0), torch.randn(4, 3)
    torch.testing.assert_close(jfn(p, x), _affine(p, x))
    p.scale, p.act = 3.0, "tanh"  # a changed Python field re-traces: never a stale program
    torch.testing.assert_close(jfn(p, x), _affine(p, x))
    assert thunder_mlir.cache_misses(jfn) == 2
    p.weight = torch.randn(3, 2)  # a new tensor of the same metadata: the same program
    torch.testing.assert_close(jfn(p, x), _affine(p, x))
    assert thunder_mlir.cache_misses(jfn) == 2
    info = thunder_mlir.cache_info(jfn)
    assert info["entries"][0]["inputs"]["args[0].scale"] == {"type": "float", "value": 2.0}
    assert "args[0].weight" in info["entries"][0]["inputs"]


class Layer:  # a KV-cache layer in the style of transformers' DynamicLayer
    def __init__(self):
        self.keys = None
        self.steps = 0


class Cache:
    def __init__(self, n):
        self.layers = [Layer() for _ in range(n)]


def _append(x, cache):
    for i, layer in enumerate(cache.layers):
        new = x * (i + 1)
        layer.keys = new if layer.keys is None else torch.cat([layer.keys, new])
        layer.steps += 1
    return cache.layers[-1].keys.sum(), cache


def _states(cache):
    return [(layer.keys, layer.steps) for layer in cache.layers]


def test_object_attribute_writes_come_back_as_eager_leaves_them():
    jfn = thunder_mlir.jit(_append)
    mine, eager = Cache(2), Cache(2)
    for step in range(3):
        x = torch.randn(2)
        out, returned = jfn(x, mine)
        ref, _ = _append(x, eager)
        assert returned is mine  # the caller's object, not a copy
        torch.testing.assert_close(out, ref)
        for (k, s), (rk, rs) in zip(_states(mine), _states(eager)):
            torch.testing.assert_close(k, rk)
            assert s == rs == step + 1
    # the steps counter is a keyed Python value: each call is a new program
    assert thunder_mlir.cache_misses(jfn) == 3


def test_in_place_update_of_an_object_tensor():
    class Static:
        def __init__(self):
            self.keys = torch.zeros(2, 5)
            self.pos = torch.tensor(0)

    def update(cache, k):
        cache.keys.index_copy_(1, cache.pos.reshape(1), k)
        cache.pos.add_(1)
        return cache.keys.sum(1)

    jfn = thunder_mlir.jit(update)
    mine, eager = Static(), Static()
    keys_before = mine.keys
    for _ in range(4):
        k = torch.randn(2, 1)
        torch.testing.assert_close(jfn(mine, k), update(eager, k))
    assert mine.keys is keys_before  # updated in place, as eager does
    torch.testing.assert_close(mine.keys, eager.keys)
    assert mine.pos.item() == 4
    assert thunder_mlir.cache_misses(jfn) == 1  # the position is a tensor: one program


def test_written_input_tensor_is_the_callers_tensor():
    def swap(obj):
        obj.a, obj.b = obj.b, obj.a
        return obj.a + 1

    ns = Layer()
    ns.a, ns.b = torch.randn(2), torch.randn(2)
    a, b = ns.a, ns.b
    thunder_mlir.jit(swap)(ns)
    assert ns.a is b and ns.b is a


def test_new_object_returned_is_rebuilt_each_call():
    def make(x):
        c = Cache(1)
        c.layers[0].keys = x + 1
        return c

    jfn = thunder_mlir.jit(make)
    x = torch.randn(3)
    c1, c2 = jfn(x), jfn(x)
    assert type(c1) is Cache and c1 is not c2 and c1.layers[0] is not c2.layers[0]
    torch.testing.assert_close(c1.layers[0].keys, x + 1)


def test_torch_pytree_registered_node_input():
    class Pair:
        def __init__(self, a, b, tag):
            self.a, self.b, self.tag = a, b, tag

    torch.utils._pytree.register_pytree_node(
        Pair, lambda p: ([p.a, p.b], p.tag), lambda c, tag: Pair(c[0], c[1], tag))

    def fn(p):
        return p.a * p.b if p.tag == "mul" else p.a + p.b

    jfn = thunder_mlir.jit(fn)
    x, y = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(jfn(Pair(x, y, "mul")), x * y)
    torch.testing.assert_close(jfn(Pair(x, y, "add")), x + y)  # the context is keyed
    assert thunder_mlir.cache_misses(jfn) == 2


def test_writing_a_foreign_tensor_to_an_input_object_is_refused():
    foreign = torch.randn(2)

    def fn(obj, x):
        obj.keys = foreign
        return x + 1

    with pytest.raises(thunder_mlir.errors.UnsupportedError, match="neither an input"):
        thunder_mlir.jit(fn)(Layer(), torch.randn(2))


def test_object_reached_twice_is_refused():
    layer = Layer()
    layer.keys = torch.randn(2)
    with pytest.raises(thunder_mlir.UnsupportedInputError, match="reached twice"):
        thunder_mlir.jit(lambda a, b: a.keys + b.keys)(layer, layer)


def test_written_tensor_also_returned_is_one_tensor():
    def fn(obj, x):
        obj.keys = x * 2
        return obj.keys

    layer = Layer()
    out = thunder_mlir.jit(fn)(layer, torch.randn(2))
    assert out is layer.keys or out.data_ptr() == layer.keys.data_ptr()


def test_index_copy_and_index_add_in_place_are_compiled():
    def fn(x, i, s):
        x.index_copy_(2, i, s)
        y = x.sum(2)
        y.index_add_(0, torch.tensor([1, 0, 1]), torch.ones(3, 3, 4), alpha=2)
        return y

    x, i, s = torch.randn(2, 3, 5, 4), torch.tensor([3]), torch.randn(2, 3, 1, 4)
    xe, xj = x.clone(), x.clone()
    jfn = thunder_mlir.jit(fn)
    torch.testing.assert_close(jfn(xj, i, s), fn(xe, i, s))
    torch.testing.assert_close(xj, xe)
    assert thunder_mlir.fallback_ops(jfn) == []


@pytest.mark.parametrize("index", [0, 2, 4])
def test_index_copy_of_one_position_and_its_gradients(index):
    """A one-element index (a KV-cache write) is a select, not a scatter between transposes
    (scatter.py ``_copy_one_index``): values at the first, a middle and the last position
    of a middle dim, and the gradients of the input and the source, against eager."""
    def fn(x, i, s):
        return (x.index_copy(2, i, s) * torch.arange(5.0).view(5, 1)).sum(-1)

    i = torch.tensor([index])
    x, s = torch.randn(2, 3, 5, 4, requires_grad=True), torch.randn(2, 3, 1, 4,
                                                                     requires_grad=True)
    jfn = thunder_mlir.jit(fn)
    out = jfn(x, i, s)
    ref = fn(x, i, s)
    torch.testing.assert_close(out, ref)
    g = torch.randn_like(ref)
    got = torch.autograd.grad(out, (x, s), g)
    want = torch.autograd.grad(ref, (x, s), g)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    assert thunder_mlir.fallback_ops(jfn) == []


def test_index_copy_of_one_position_keeps_eagers_shape_errors_and_symbols():
    """The select of ``_copy_one_index`` would broadcast a source with a size-1 dim that
    eager refuses: such a call raises eager's error. With dynamic shapes the shortcut is
    kept, its size equalities guarded: one trace for three batch sizes."""
    def fn(x, i, s):
        return x.index_copy(2, i, s)

    x, i = torch.randn(2, 3, 5, 4), torch.tensor([1])
    with pytest.raises(RuntimeError, match="same slice shapes"):
        fn(x, i, torch.randn(2, 1, 1, 4))
    with pytest.raises(RuntimeError, match="same slice shapes"):
        thunder_mlir.jit(fn)(x, i, torch.randn(2, 1, 1, 4))

    jfn = thunder_mlir.jit(fn, dynamic=True)
    for n in (2, 3, 6):
        x, s = torch.randn(n, 3, 5, 4), torch.randn(n, 3, 1, 4)
        torch.testing.assert_close(jfn(x, i, s), fn(x, i, s), rtol=0, atol=0)
    assert thunder_mlir.cache_misses(jfn) == 1
    assert thunder_mlir.fallback_ops(jfn) == []


def _trees():
    """Output trees as jit returns them: tensors, Python constants, None, nested in tuples,
    lists, dicts (any key order), namedtuples and OrderedDicts (the general path)."""
    from hypothesis import strategies as st

    leaf = st.one_of(st.just("tensor"), st.none(), st.integers(-3, 3), st.text(max_size=2),
                     st.floats(allow_nan=False, width=32))
    pair = collections.namedtuple("pair", "a b")

    def nest(children):
        return st.one_of(st.lists(children, max_size=4).map(tuple),
                         st.lists(children, max_size=4),
                         st.dictionaries(st.sampled_from("zyxwv"), children, max_size=4),
                         st.tuples(children, children).map(lambda t: pair(*t)),
                         st.dictionaries(st.sampled_from("cba"), children, max_size=3)
                         .map(collections.OrderedDict))
    return st.recursive(leaf, nest, max_leaves=24)


def test_output_rebuild_matches_tree_unflatten():
    """The cache entry's output builder (cache._builder: one generated expression for
    trees of tuples, lists and dicts) gives what torch's tree_unflatten gives: same
    structure, node types, dict key order, and the very objects at each leaf."""
    from hypothesis import given, settings, HealthCheck
    import torch.utils._pytree as torch_pytree

    from thunder_mlir.cache import CacheEntry

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
    @given(_trees())
    def check(tree):
        leaves, spec = torch_pytree.tree_flatten(tree)
        positions = [k for k, x in enumerate(leaves) if x == "tensor"]
        consts = [None if x == "tensor" else x for x in leaves]
        outs = [torch.zeros(1) for _ in positions]
        entry = CacheEntry.__new__(CacheEntry)
        entry.out_spec, entry.out_consts, entry.out_tensor_positions = spec, consts, positions
        want = list(consts)
        for p, t in zip(positions, outs):
            want[p] = t
        expected = torch_pytree.tree_unflatten(want, spec)
        got = entry._make_rebuild()(outs)
        assert torch_pytree.tree_structure(got) == torch_pytree.tree_structure(expected)
        assert type(got) is type(expected)
        if isinstance(got, dict):
            assert list(got) == list(expected)
        got_leaves = torch_pytree.tree_leaves(got)
        assert len(got_leaves) == len(want)
        assert all(a is b for a, b in zip(got_leaves, want))

    check()
