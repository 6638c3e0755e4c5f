"""Scalar arguments as torch's parser reads them (frontend/scalar_args.py), against eager.

A type eager rejects raises eager's error at the user's line; a 0-d tensor torch reads as a
number is specialized on its value (and guarded), except where the symbol computes with it;
Python scalar types are kept as written, so type promotion is eager's.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import thunder_mlir
from thunder_mlir.errors import TorchOpTypeError


def _same(fn, *args):
    expected = fn(*args)
    jfn = thunder_mlir.jit(fn)
    actual = jfn(*args)
    torch.testing.assert_close(actual, expected)
    assert actual.dtype == expected.dtype
    return jfn


@pytest.mark.parametrize("call,what", [
    (lambda x: F.dropout(x, 0.0, training=1), "argument 'train'"),          # Python function
    (lambda x: F.softmax(x, 1.0), "argument 'dim'"),
    (lambda x: x.expand([3, 4.0]), "expand"),                              # a list element
    (lambda x: torch.ops.aten._safe_softmax.default(x, 1.0), "Unable to cast"),
    (lambda x: F.batch_norm(x, None, None, training=torch.tensor(True)), "argument 'training'"),
], ids=["dropout-int-training", "softmax-float-dim", "expand-float-size", "overload-float-dim",
        "batch_norm-tensor-training"])
def test_a_type_eager_rejects_raises_eagers_error_at_the_users_line(call, what):
    x = torch.randn(3, 4)
    with pytest.raises(Exception) as eager:
        call(x)
    with pytest.raises(type(eager.value), match=what) as jitted:
        thunder_mlir.jit(call)(x)
    assert str(jitted.value).startswith(__file__), str(jitted.value)
    if isinstance(eager.value, TypeError):
        assert isinstance(jitted.value, TorchOpTypeError)


def test_zero_d_tensor_read_as_a_number_is_specialized_and_guarded():
    x = torch.randn(3, 4)

    def f(x, d, p):
        return torch.sum(x, dim=d) * F.dropout(torch.ones(()), p=p, training=False) + \
            torch.full((1,), p)

    jfn = _same(f, x, torch.tensor(1), torch.tensor(0.5))
    _same(jfn, x, torch.tensor(1), torch.tensor(0.5))
    assert thunder_mlir.cache_misses(jfn) == 1
    torch.testing.assert_close(jfn(x, torch.tensor(0), torch.tensor(0.5)),
                               f(x, torch.tensor(0), torch.tensor(0.5)))
    assert thunder_mlir.cache_misses(jfn) == 2  # another value: a value guard failed


def test_a_value_of_an_input_needs_no_prefix_program(monkeypatch):
    """``dim=torch.tensor(1)``, an input: its value is read from the call's input, no
    program prefix is compiled to compute it."""
    from thunder_mlir.runtime import plan

    built = []
    real = plan.build_plan
    monkeypatch.setattr(plan, "build_plan", lambda *a, **k: built.append(1) or real(*a, **k))
    _same(lambda x, d: torch.sum(x, dim=d), torch.randn(3, 4), torch.tensor(1))
    assert len(built) == 1  # the program itself only


@pytest.mark.parametrize("shape,flag", [((5, 5), True), ((5,), False)], ids=["2d", "1d"])
def test_the_python_type_of_a_read_tensor_is_eagers_reading(shape, flag):
    """A bool 0-d tensor given where ``std`` has an int-list ``dim`` and a bool
    ``unbiased`` overload: eager's parser reads it as ``dim=int(t)`` (on a 1-d input the
    two readings have the same shape, not the same value)."""
    _same(lambda x, t: torch.std(x, t), torch.randn(*shape), torch.tensor(flag))
    _same(lambda x, t: torch.full((2,), t), torch.randn(1), torch.tensor(flag))  # bool


@pytest.mark.filterwarnings("ignore:Using a non-tuple sequence")
def test_a_tensor_inside_an_index_list_stays_a_tensor():
    """``x[([t, 2, 3], [1, 3, 3], [0, 0, 2])]``: the list is stacked into an index tensor
    (no specialization), as ``torch.tensor([t, 2])`` is."""
    x = torch.randn(5, 5, 5)
    jfn = _same(lambda x, t: x[([t, 2, 3], [1, 3, 3], [0, 0, 2])], x, torch.tensor(1))
    _same(jfn, x, torch.tensor(4))
    assert thunder_mlir.cache_misses(jfn) == 1
    _same(lambda t: torch.tensor([t, 2]), torch.tensor(7))


def test_a_0d_tensor_for_a_tensor_parameter_stays_a_tensor():
    """``one_hot(torch.tensor(5), -1)``: the function reads its input's value itself (its
    size is data-dependent), not as a number argument: the input stays a tensor, not 5,
    which one_hot refuses (the OpInfo sample that found it)."""
    _same(lambda x: F.one_hot(x, -1), torch.tensor(5))
    _same(lambda x, t: F.one_hot(x, 10) * t, torch.tensor(3), torch.tensor(2))


def test_a_symbol_computing_with_the_tensor_keeps_it():
    """``narrow``'s start as a 0-d tensor: one program for every start."""
    x = torch.randn(6, 3)
    jfn = _same(lambda x, s: x.narrow(0, s, 2), x, torch.tensor(1))
    _same(jfn, x, torch.tensor(3))
    assert thunder_mlir.cache_misses(jfn) == 1


@pytest.mark.parametrize("scalar", [1, 1.0, True], ids=["int", "float", "bool"])
def test_python_scalar_types_promote_as_eagers(scalar):
    x = torch.arange(6).reshape(2, 3)
    _same(lambda x: x + scalar, x)
    _same(lambda x: torch.full((2,), scalar) + 0, x)
    _same(lambda x: torch.add(x, x, alpha=int(scalar)), x)


@pytest.mark.filterwarnings("ignore:Using a non-tuple sequence")
def test_a_list_index_of_floats_is_eagers_int64_index():
    """``x[[1.7, 2]]`` is ``x[[1, 2]]`` in eager (indexing_tensor_from_data)."""
    _same(lambda x: x[[1.7, 2]], torch.arange(25.0).reshape(5, 5))


def test_user_executor_sees_the_scalars_as_written():
    """A user executor claiming attention gets ``dropout_p=0`` as the int the user wrote,
    in its checker and its implementation (as eager's call has it), and the program's
    outputs are eager's. (Under grad mode the grad pass inlines a composite whose rule does
    not apply before executors claim ops.)"""
    from thunder_mlir.extend import OperatorExecutor

    seen = []

    def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
             enable_gqa=False):
        seen.append(("fn", type(dropout_p)))
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p,
                                              is_causal=is_causal)

    def like(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
             enable_gqa=False):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask,
                                              dropout_p=dropout_p, is_causal=is_causal)

    ex = OperatorExecutor("scalar_types_ex")
    op = ex.register_operator("sdpa", like=like, fn=sdpa)

    def checker(q, k, v, attn_mask=None, dropout_p=0.0, **kwargs):
        seen.append(("checker", type(dropout_p)))
        return True

    ex.register_implementation(F.scaled_dot_product_attention, op, checker=checker)

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0, is_causal=True)

    ins = [torch.randn(2, 2, 8, 4, generator=torch.Generator().manual_seed(i))
           for i in range(3)]
    jfn = thunder_mlir.jit(f, executors=[ex])
    torch.testing.assert_close(jfn(*ins), f(*ins))
    assert thunder_mlir.fallback_ops(jfn) == []
    assert ("checker", int) in seen and ("fn", int) in seen, seen
