"""Pytree inputs and outputs: containers in and out, Python values as specialized inputs,
torch.Size, torch.return_types, and the error for an unsupported input type."""

from __future__ import annotations

import collections

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
    pass


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
