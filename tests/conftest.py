"""Shared helpers for the thunder_mlir test suite.

The oracle is always eager PyTorch: a jitted function must return what the plain function
returns on the same inputs (same pytree structure, dtypes, shapes and values, compared with
``torch.testing.assert_close``'s default tolerances unless a test says why not).
"""

from __future__ import annotations

import pytest
import torch
import torch.utils._pytree as pytree

import thunder_mlir
import thunder_mlir.runtime.compile_cache


@pytest.fixture(autouse=True, scope="session")
def _compile_cache_dir(tmp_path_factory):
    """The persistent compile cache lives in this session's temporary directory (also for
    subprocesses, through the environment), never in the user's cache: a test must not
    depend on what an earlier run left there."""
    import os

    path = tmp_path_factory.mktemp("compile_cache")
    old = os.environ.get(thunder_mlir.runtime.compile_cache.ENV_VAR)
    os.environ[thunder_mlir.runtime.compile_cache.ENV_VAR] = str(path)
    thunder_mlir.set_compile_cache_dir(path)
    yield path
    if old is None:
        del os.environ[thunder_mlir.runtime.compile_cache.ENV_VAR]
    else:
        os.environ[thunder_mlir.runtime.compile_cache.ENV_VAR] = old


@pytest.fixture(autouse=True)
def _seed():
    """Every test draws the same random inputs on every run."""
    torch.manual_seed(0)
    yield


def _clone_tree(tree):
    return pytree.tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, tree)


def assert_same_tree(actual, expected, **close_kw):
    """Same pytree structure; tensors ``assert_close`` (dtype, shape, device checked too);
    other leaves equal."""
    a_leaves, a_spec = pytree.tree_flatten(actual)
    e_leaves, e_spec = pytree.tree_flatten(expected)
    assert a_spec == e_spec, f"output structure differs:\n  jit:   {a_spec}\n  eager: {e_spec}"
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        if isinstance(e, torch.Tensor):
            assert isinstance(a, torch.Tensor), f"leaf {i}: expected a tensor, got {type(a)}"
            torch.testing.assert_close(a, e, msg=lambda m: f"leaf {i}: {m}", **close_kw)
        else:
            assert type(a) is type(e) and a == e, f"leaf {i}: {a!r} != {e!r}"


def assert_close_to_eager(fn, *args, jfn=None, expect_fallback: bool = False, **close_kw):
    """Run ``fn`` eagerly and jitted on ``args`` and compare; return the jitted function.

    ``expect_fallback=False`` also asserts the whole program ran on XLA
    (``thunder_mlir.fallback_ops(jfn) == []``). Inputs are cloned for each run, so an
    accidental in-place update by either side cannot hide a difference.
    """
    jfn = jfn if jfn is not None else thunder_mlir.jit(fn)
    expected = fn(*_clone_tree(args))
    actual = jfn(*_clone_tree(args))
    assert_same_tree(actual, expected, **close_kw)
    if not expect_fallback:
        assert thunder_mlir.fallback_ops(jfn) == [], \
            f"expected the program to run fully on XLA, fallbacks: {thunder_mlir.fallback_ops(jfn)}"
    return jfn


# Torch-overridable functions that thunder_mlir can never have a symbol for: calls to them
# reach the tracer (through __torch_function__) and always take the torch fallback, so the
# fallback tests do not depend on which ops happen to lack symbols today.
def unregistered_cumprod(x, dim):
    """torch.cumprod, seen by the tracer as an op with no symbol."""
    if torch.overrides.has_torch_function((x,)):
        return torch.overrides.handle_torch_function(unregistered_cumprod, (x,), x, dim)
    return torch.cumprod(x, dim)


def unregistered_logcumsumexp(x, dim):
    """torch.logcumsumexp, seen by the tracer as an op with no symbol."""
    if torch.overrides.has_torch_function((x,)):
        return torch.overrides.handle_torch_function(unregistered_logcumsumexp, (x,), x, dim)
    return torch.logcumsumexp(x, dim)


def unregistered_topk(x, k):
    """torch.topk (a (values, indices) namedtuple), seen by the tracer as an op with no
    symbol."""
    if torch.overrides.has_torch_function((x,)):
        return torch.overrides.handle_torch_function(unregistered_topk, (x,), x, k)
    return torch.topk(x, k)


def unregistered_sort(x, dim, descending=False):
    """torch.sort (a torch.return_types.sort namedtuple), seen by the tracer as an op with
    no symbol."""
    if torch.overrides.has_torch_function((x,)):
        return torch.overrides.handle_torch_function(unregistered_sort, (x,), x, dim,
                                                     descending=descending)
    return torch.sort(x, dim, descending=descending)


def unregistered_mul_(x, value):
    """In-place ``x.mul_(value)``, seen by the tracer as an in-place op with no symbol."""
    if torch.overrides.has_torch_function((x,)):
        return torch.overrides.handle_torch_function(unregistered_mul_, (x,), x, value)
    return x.mul_(value)


def unregistered_add_(x, value):
    """In-place ``x.add_(value)``, seen by the tracer as an in-place op with no symbol."""
    if torch.overrides.has_torch_function((x,)):
        return torch.overrides.handle_torch_function(unregistered_add_, (x,), x, value)
    return x.add_(value)
