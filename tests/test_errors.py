"""Errors a user can read (issue 13, area 9; thunder_mlir/error_reporting.py).

* A ``ThunderError`` shows the user's line first (``file:line: source``) and its traceback
  holds no thunder_mlir (or torch) frame, unless ``THUNDER_MLIR_VERBOSE_ERRORS=1``.
* Bad input never gives a stack trace from deep inside thunder_mlir: each common way of
  getting one (mismatched shapes for matmul/add/cat/conv/linear/view, indices out of range,
  dtype combinations eager has no kernel for, sparse/nested/quantized/subclass inputs,
  wrong number of arguments) gives a message naming the problem, the user's line and what
  to do. Where eager PyTorch raises too, the exception is an instance of eager's type and
  contains eager's message: the oracle is eager, run in the test.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import traceback

import pytest
import torch
import torch.nn.functional as F

import thunder_mlir
from thunder_mlir import ThunderError
from thunder_mlir.error_reporting import HIDDEN_NOTE, VERBOSE_ENV
from thunder_mlir.errors import (
    CallArgumentError, TorchOpError, TorchOpIndexError, TorchOpNotImplementedError,
    TorchOpRuntimeError, UnsupportedError, UnsupportedInputError)

HERE = os.path.abspath(__file__)
PACKAGE_DIR = os.path.dirname(os.path.abspath(thunder_mlir.__file__)) + os.sep


@pytest.fixture(autouse=True)
def _terse(monkeypatch):
    monkeypatch.delenv(VERBOSE_ENV, raising=False)


def _line(fn, fragment: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, text in enumerate(lines) if fragment in text)


def _where(fn, fragment: str) -> str:
    """``file:line: source`` of the line of ``fn`` containing ``fragment``."""
    n = _line(fn, fragment)
    lines, start = inspect.getsourcelines(fn)
    return f"{HERE}:{n}: {lines[n - start].strip()}"


def _frames(e: BaseException) -> list[str]:
    return [f.filename for f in traceback.extract_tb(e.__traceback__)]


def _internal_frames(e: BaseException) -> list[str]:
    torch_dir = os.path.dirname(torch.__file__) + os.sep
    return [f for f in _frames(e) if f.startswith(PACKAGE_DIR) or f.startswith(torch_dir)]


def _raised(fn, *args):
    """The exception ``fn(*args)`` raises (fails the test if it returns)."""
    try:
        fn(*args)
    except Exception as e:  # noqa: BLE001 - returned for inspection
        return e
    raise AssertionError(f"{fn} returned without raising")


CALL_SITE = _where(_raised, "        fn(*args)")  # where the tests call the jitted function


# ------------------------------------------------------------ traceback and first line
def data_dependent(x):
    if x.numpy().sum() > 0:  # (a branch on x.sum() is specialized and guarded)
        return x
    return -x


def test_thunder_error_first_line_and_no_internal_frames():
    e = _raised(thunder_mlir.jit(data_dependent), torch.ones(2))
    assert isinstance(e, thunder_mlir.DataDependentControlFlowError)
    assert str(e).splitlines()[0] == _where(data_dependent, "if x.numpy()")
    assert _internal_frames(e) == []
    # the user's frames: this test's call, then the traced line
    tb = traceback.extract_tb(e.__traceback__)
    assert [(f.filename, f.lineno) for f in tb][-1] == (HERE, _line(data_dependent,
                                                                    "x.numpy()"))
    assert HIDDEN_NOTE in e.__notes__
    assert e.__suppress_context__ or e.__context__ is None


def test_verbose_env_shows_every_frame(monkeypatch):
    monkeypatch.setenv(VERBOSE_ENV, "1")
    e = _raised(thunder_mlir.jit(data_dependent), torch.ones(2))
    files = _frames(e)
    assert any(f.endswith(os.path.join("thunder_mlir", "function.py")) for f in files), files
    assert any(f.endswith(os.path.join("frontend", "dispatch.py")) for f in files), files
    assert HIDDEN_NOTE not in getattr(e, "__notes__", [])
    assert str(e).splitlines()[0] == _where(data_dependent, "if x.numpy()")  # still first


def test_verbose_env_chains_a_translated_error_to_the_original(monkeypatch):
    monkeypatch.setenv(VERBOSE_ENV, "1")
    e = _raised(thunder_mlir.jit(lambda a, b: a @ b), torch.ones(2, 3), torch.ones(4, 5))
    assert isinstance(e, TorchOpRuntimeError)
    assert e.__cause__ is e.original and _internal_frames(e.__cause__) != []


PROGRAM = """\
import torch, thunder_mlir

def f(a, b):
    return torch.add(a, b)

thunder_mlir.jit(f)(torch.ones(2), torch.ones(3))
"""


@pytest.mark.parametrize("verbose", [False, True])
def test_printed_traceback_of_an_uncaught_error(tmp_path, verbose):
    """What a user sees in the terminal: the script's own two frames, then the error with
    the line first; with the environment variable, thunder_mlir's frames too."""
    script = tmp_path / "user_script.py"
    script.write_text(PROGRAM)
    env = {k: v for k, v in os.environ.items() if k != VERBOSE_ENV}
    if verbose:
        env[VERBOSE_ENV] = "1"
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 1
    frames = [ln.split('"')[1] for ln in r.stderr.splitlines() if ln.startswith('  File "')]
    if verbose:
        assert any("thunder_mlir" in f for f in frames), r.stderr
        assert "The above exception was the direct cause" in r.stderr
    else:
        assert frames == [str(script), str(script)], r.stderr
        assert (f"thunder_mlir.errors.TorchOpRuntimeError: {script}:4: return torch.add(a, b)\n"
                "  The size of tensor a (2) must match the size of tensor b (3) at "
                "non-singleton dimension 0\n") in r.stderr, r.stderr
        assert VERBOSE_ENV in r.stderr


# ------------------------------------------------------------------ bad input: ops
lin = torch.nn.Linear(3, 2)
conv = torch.nn.Conv2d(2, 4, 3)

# (id, program, inputs, the line's fragment, thunder_mlir's error type)
BAD_OPS = [
    ("matmul_shapes", lambda a, b: a @ b, lambda: (torch.randn(2, 3), torch.randn(4, 5)),
     "a @ b", TorchOpRuntimeError),
    ("add_shapes", lambda a, b: torch.add(a, b), lambda: (torch.randn(2), torch.randn(3)),
     "torch.add", TorchOpRuntimeError),
    ("cat_shapes", lambda a, b: torch.cat([a, b]),
     lambda: (torch.randn(2, 3), torch.randn(2, 4)), "torch.cat", TorchOpRuntimeError),
    ("conv2d_channels", lambda x, w: F.conv2d(x, w),
     lambda: (torch.randn(1, 3, 8, 8), torch.randn(4, 2, 3, 3)), "F.conv2d",
     TorchOpRuntimeError),
    ("view_numel", lambda x: x.view(5), lambda: (torch.randn(4),), "x.view", TorchOpRuntimeError),
    ("index_out_of_range", lambda x: x[5], lambda: (torch.randn(3),), "x[5]", TorchOpIndexError),
    ("dim_out_of_range", lambda x: x.sum(dim=3), lambda: (torch.randn(3),), "x.sum",
     TorchOpIndexError),
    ("matmul_dtypes", lambda a, b: torch.matmul(a, b),
     lambda: (torch.randn(2, 2), torch.randn(2, 2, dtype=torch.float64)), "torch.matmul",
     TorchOpRuntimeError),
    ("bitwise_of_floats", lambda a, b: a & b, lambda: (torch.randn(2), torch.randn(2)), "a & b",
     TorchOpNotImplementedError),
    ("embedding_float_indices", lambda i, w: F.embedding(i, w),
     lambda: (torch.zeros(2), torch.randn(4, 3)), "F.embedding", TorchOpRuntimeError),
    ("where_int_condition", lambda c, a: torch.where(c, a, a),
     lambda: (torch.ones(2, dtype=torch.int64), torch.randn(2)), "torch.where",
     TorchOpRuntimeError),
    # before issue 13 these computed a result where eager raises
    ("gather_float_index", lambda x, i: torch.gather(x, 0, i),
     lambda: (torch.randn(3), torch.zeros(2)), "torch.gather", TorchOpRuntimeError),
    ("split_sizes_sum", lambda x: torch.split(x, [1, 1]), lambda: (torch.randn(3),),
     "torch.split", TorchOpRuntimeError),
    ("max_pool_output_too_small", lambda x: F.max_pool2d(x, 5),
     lambda: (torch.randn(1, 1, 3, 3),), "F.max_pool2d", TorchOpRuntimeError),
    ("sum_duplicate_dims", lambda x: x.sum((0, 0)), lambda: (torch.randn(2, 3),), "x.sum",
     TorchOpRuntimeError),
    ("scatter_index_rank", lambda x, i, v: x.scatter(0, i, v),
     lambda: (torch.randn(3), torch.zeros(2, 2, dtype=torch.int64), torch.randn(2, 2)),
     "x.scatter", TorchOpRuntimeError),
    ("masked_fill_float_mask", lambda x, m: x.masked_fill(m, 0.0),
     lambda: (torch.randn(3), torch.randn(3)), "masked_fill", TorchOpRuntimeError),
    ("int_to_negative_power", lambda x: x ** -1, lambda: (torch.ones(2, dtype=torch.int64),),
     "x ** -1", TorchOpRuntimeError),
    # before issue 13: an XLA compile error (stablehlo.negate of i1)
    ("negate_bool", lambda x: -x, lambda: (torch.ones(2, dtype=torch.bool),), "-x",
     TorchOpRuntimeError),
    # a factory: re-run on the meta device
    ("arange_zero_step", lambda x: x + torch.arange(0, 3, 0), lambda: (torch.randn(3),),
     "torch.arange", TorchOpRuntimeError),
]


@pytest.mark.parametrize("name, fn, make, fragment, cls", BAD_OPS, ids=[c[0] for c in BAD_OPS])
def test_bad_op_arguments_raise_eagers_error_at_the_users_line(name, fn, make, fragment, cls):
    eager = _raised(fn, *make())
    e = _raised(thunder_mlir.jit(fn), *make())
    assert isinstance(e, type(eager)), f"eager {type(eager)}, jit {type(e)}"
    assert isinstance(e, cls) and isinstance(e, TorchOpError) and isinstance(e, ThunderError)
    lines = str(e).splitlines()
    assert lines[0] == _where(fn, fragment)
    assert str(eager).strip().splitlines()[0] in str(e)
    assert "Eager PyTorch raises this" in str(e) and "Fix the shapes or dtypes" in str(e)
    assert _internal_frames(e) == []


def test_module_with_wrong_input_shape():
    """nn.Linear(3, 2) given 4 features: eager's matmul error, at the library line that
    calls the op, after the user's call."""
    x = torch.randn(2, 4)
    eager = _raised(lin, x)
    e = _raised(thunder_mlir.jit(lin), x)
    assert isinstance(e, TorchOpRuntimeError) and isinstance(e, type(eager))
    assert str(eager).splitlines()[0] in str(e)
    # the op is in torch's Linear.forward: the user's line is the call of the module
    assert str(e).splitlines()[0] == CALL_SITE
    assert _internal_frames(e) == []


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3)

    def forward(self, x):
        return self.conv(x).relu()


def test_user_module_error_names_the_forward_line_first():
    e = _raised(thunder_mlir.jit(Net()), torch.randn(1, 3, 8, 8))
    assert isinstance(e, RuntimeError) and isinstance(e, TorchOpError)
    assert str(e).splitlines()[0] == _where(Net.forward, "self.conv(x)")
    assert _internal_frames(e) == []
    assert _frames(e)[-1] == HERE


def test_shape_error_in_a_nested_jitted_function_is_reported_once():
    @thunder_mlir.jit
    def inner(a, b):
        return a * b

    @thunder_mlir.jit
    def outer(a, b):
        return inner(a, b) + 1

    e = _raised(outer, torch.ones(2), torch.ones(3))
    assert isinstance(e, TorchOpRuntimeError)
    assert str(e).splitlines()[0] == _where(inner, "a * b")
    assert str(e).count("Eager PyTorch raises") == 1
    assert _internal_frames(e) == []


def test_grad_api_errors_are_reported_too():
    e = _raised(thunder_mlir.grad(lambda a, b: (a @ b).sum()), torch.ones(2, 3), torch.ones(2))
    assert isinstance(e, TorchOpRuntimeError)
    assert _internal_frames(e) == []


def test_failure_eager_does_not_share_is_reported_as_thunders(monkeypatch):
    """A symbol failing where eager accepts the call: an UnsupportedError that says so,
    names the op and its arguments and the way around it, not an internal trace."""
    import functools

    from thunder_mlir.ir import prims
    from thunder_mlir.frontend.symbols import SYMBOLS

    # torch.sin's decomposition replaced by a prim check that fails (inside thunder_mlir)
    monkeypatch.setattr(SYMBOLS[torch.sin], "impl", functools.partial(prims._check, False))

    def f(x):
        return torch.sin(x) + 1

    e = _raised(thunder_mlir.jit(f), torch.ones(2))
    assert isinstance(e, UnsupportedError) and isinstance(e, NotImplementedError)
    lines = str(e).splitlines()
    assert lines[0] == _where(f, "torch.sin")
    assert ("thunder_mlir failed on torch.sin(tensor(shape=(2,), dtype=torch.float32)), which "
            "eager PyTorch accepts (ValueError: prim: ") in str(e)
    assert "compute this op outside the jitted function" in str(e)
    assert _internal_frames(e) == []


def test_users_own_exception_is_unchanged_with_the_users_frames():
    def f(x):
        raise KeyError("mine")

    eager = _raised(f, torch.ones(2))
    e = _raised(thunder_mlir.jit(f), torch.ones(2))
    assert type(e) is type(eager) and str(e) == str(eager)
    assert _internal_frames(e) == []
    tb = traceback.extract_tb(e.__traceback__)
    assert (tb[-1].filename, tb[-1].lineno) == (HERE, _line(f, "raise KeyError"))


# ---------------------------------------------------------------- bad input: inputs
def _square(x):
    return x * x


class MyTensor(torch.Tensor):
    pass


BAD_INPUTS = [
    ("sparse_coo", lambda: torch.randn(3, 3).to_sparse(), "a sparse_coo tensor", "to_dense()"),
    ("sparse_csr", lambda: torch.randn(3, 3).to_sparse_csr(), "a sparse_csr tensor",
     "to_dense()"),
    ("nested", lambda: torch.nested.nested_tensor([torch.randn(2), torch.randn(3)]),
     "a nested tensor", "to_padded_tensor"),
    ("quantized", lambda: torch.quantize_per_tensor(torch.randn(3), 0.1, 0, torch.quint8),
     "a quantized tensor (torch.quint8)", "dequantize()"),
    ("subclass", lambda: torch.randn(3).as_subclass(MyTensor),
     f"a tensor subclass {__name__}.MyTensor", "as_subclass(torch.Tensor)"),
]


@pytest.mark.parametrize("name, make, what, fix", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_unsupported_tensor_input_is_named_with_the_fix(name, make, what, fix):
    jf = thunder_mlir.jit(_square)
    e = _raised(jf, make())
    assert isinstance(e, UnsupportedInputError) and isinstance(e, ValueError)
    assert str(e).splitlines()[0] == CALL_SITE
    assert f"the input at args[0] is {what}" in str(e) and fix in str(e)
    assert _internal_frames(e) == []


def test_sparse_input_after_a_dense_one_is_still_refused():
    """Same shape and dtype as a compiled entry (a cache hit): refused all the same."""
    jf = thunder_mlir.jit(_square)
    jf(torch.randn(3, 3))
    e = _raised(jf, torch.randn(3, 3).to_sparse())
    assert isinstance(e, UnsupportedInputError) and "sparse_coo" in str(e)


def test_sparse_input_is_refused_before_tracing():
    """``x.is_sparse`` would read False on a proxy: a silent difference, so the input is
    refused before the program is traced."""
    e = _raised(thunder_mlir.jit(lambda x: x.is_sparse), torch.randn(2, 2).to_sparse())
    assert isinstance(e, UnsupportedInputError)


def test_parameters_are_accepted():
    p = torch.nn.Parameter(torch.randn(3))
    torch.testing.assert_close(thunder_mlir.jit(_square)(p), _square(p))


# ----------------------------------------------------------- bad input: the call
def two(a, b):
    return a + b


def test_function_called_with_wrong_number_of_args():
    eager = _raised(two, torch.ones(2))
    e = _raised(thunder_mlir.jit(two), torch.ones(2))
    assert isinstance(e, CallArgumentError) and isinstance(e, TypeError)
    lines = str(e).splitlines()
    assert lines[0] == CALL_SITE
    assert lines[1].strip() == str(eager)
    assert "two(a, b)" in str(e)
    assert _internal_frames(e) == []


def test_module_called_with_wrong_number_of_args():
    m = torch.nn.Linear(3, 2)
    x = torch.randn(2, 3)
    for args in ((x, x), ()):
        eager = _raised(m, *args)
        e = _raised(thunder_mlir.jit(m), *args)
        assert isinstance(e, CallArgumentError) and isinstance(e, TypeError)
        assert str(eager) in str(e)
        assert "Linear.forward(input: torch.Tensor)" in str(e)
        assert _internal_frames(e) == []


def test_unexpected_keyword_argument():
    eager = _raised(lambda: two(torch.ones(2), c=torch.ones(2)))
    e = _raised(lambda: thunder_mlir.jit(two)(torch.ones(2), c=torch.ones(2)))
    assert isinstance(e, CallArgumentError) and str(eager) in str(e)


def test_opaque_input_object_names_the_call_line():
    class Box:  # state in slots: not an input object thunder_mlir can copy (pytrees.py)
        __slots__ = ("content",)

    e = _raised(thunder_mlir.jit(_square), Box())
    assert isinstance(e, UnsupportedInputError)
    assert str(e).splitlines()[0] == CALL_SITE
    assert "cannot accept an input of type" in str(e)


# ------------------------------------------------ custom torch.autograd.Function
class NumpyInForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.from_numpy(x.numpy() * 2)

    @staticmethod
    def backward(ctx, g):
        return g * 2


def test_custom_function_forward_that_cannot_be_traced_names_its_line():
    e = _raised(thunder_mlir.jit(lambda x: NumpyInForward.apply(x)), torch.ones(2))
    assert isinstance(e, thunder_mlir.DataDependentControlFlowError)
    assert str(e).splitlines()[0] == _where(NumpyInForward.forward, "x.numpy()")
    assert _internal_frames(e) == []


class Dirty(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.mark_dirty(x)
        return x.mul_(2)

    @staticmethod
    def backward(ctx, g):
        return g * 2


def test_unsupported_custom_function_feature_is_an_unsupported_error():
    """What custom-Function support leaves unsupported (``ctx.mark_dirty``, an in-place
    forward) is refused as an UnsupportedError (a NotImplementedError) naming the line."""
    e = _raised(thunder_mlir.jit(lambda x: Dirty.apply(x.clone())),
                torch.randn(2, requires_grad=True))
    assert isinstance(e, NotImplementedError) and isinstance(e, ThunderError)
    assert str(e).splitlines()[0] == _where(Dirty.forward, "ctx.mark_dirty")
    assert _internal_frames(e) == []


def test_op_on_an_input_list_is_judged_like_eager():
    """An input list reaches the program as a frozen TracedList; its tensors are still
    re-run as eager would take them (not reported with an internal message)."""
    def f(tensors):
        return torch.cat(tensors)

    args = [torch.randn(2, 3), torch.randn(2, 4)]
    eager = _raised(f, args)
    e = _raised(thunder_mlir.jit(f), args)
    assert isinstance(e, TorchOpRuntimeError)
    assert str(eager).splitlines()[0] in str(e) and "TensorProxy" not in str(e)
    assert str(e).splitlines()[0] == _where(f, "torch.cat")
