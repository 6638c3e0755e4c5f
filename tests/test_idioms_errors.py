"""Idiom catalogue, issue 13 areas 3 (code from strings, the REPL, notebooks) and 9 (errors
a user can read), on tests/idiom_harness.py: each case runs eagerly and jitted, and where
eager raises, the jitted program must raise the same exception type containing eager's
first line; ``check_raises`` covers what thunder_mlir refuses on purpose."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import thunder_mlir
from idiom_harness import Step, check_idiom, check_raises
from thunder_mlir.errors import CallArgumentError, TorchOpError, UnsupportedInputError


def _from_string(src: str, filename: str, name: str):
    """A function defined by code compiled from a string (``exec``, ``python -c``, a REPL
    or notebook cell all have such ``<...>`` filenames)."""
    ns: dict = {"__name__": "__main__", "torch": torch}
    exec(compile(src, filename, "exec"), ns)  # noqa: S102 - the test's own code
    return ns[name]


# ----------------------------------------------------------- area 9: eager's errors
def test_idiom_add_of_mismatched_shapes():
    check_idiom(lambda a, b: a + b, lambda: (torch.randn(2, requires_grad=True), torch.randn(3)))


def test_idiom_matmul_of_mismatched_shapes():
    check_idiom(lambda a, b: a @ b, lambda: (torch.randn(2, 3), torch.randn(4, 5)))


def test_idiom_cat_of_mismatched_shapes():
    check_idiom(lambda a, b: torch.cat([a, b], dim=0),
                lambda: (torch.randn(2, 3), torch.randn(2, 4)))


def test_idiom_conv_module_given_the_wrong_channels():
    """The error is eager's whether the bad input comes at the first call or later (a new
    input shape re-traces); a good call in between works."""
    check_idiom(torch.nn.Conv2d(2, 4, 3), lambda: (torch.randn(1, 3, 8, 8),))
    # make_args runs once per side per step: eager then jit, step 0 good, step 1 bad
    shapes = iter([(1, 2, 8, 8), (1, 2, 8, 8), (1, 3, 8, 8), (1, 3, 8, 8)])
    check_idiom(torch.nn.Conv2d(2, 4, 3), lambda: (torch.randn(*next(shapes)),),
                steps=[Step(), Step()])


def test_idiom_float_bitwise_and_has_no_kernel():
    check_idiom(lambda a, b: a & b, lambda: (torch.randn(2), torch.randn(2)))


def test_idiom_index_out_of_range():
    check_idiom(lambda x: x[5] * 2, lambda: (torch.randn(3),))


def test_idiom_where_with_an_integer_condition():
    """Eager refuses a non-bool (non-uint8) condition; thunder_mlir used to compute it."""
    check_idiom(lambda c, a: torch.where(c, a, -a),
                lambda: (torch.tensor([1, 0]), torch.randn(2)))


def test_idiom_embedding_with_float_indices():
    check_idiom(lambda i, w: F.embedding(i, w), lambda: (torch.zeros(2), torch.randn(4, 3)))


def test_idiom_module_called_with_an_extra_argument():
    jitted = thunder_mlir.jit(torch.nn.Linear(3, 2))
    x = torch.randn(2, 3)
    try:
        jitted(x, x)
    except CallArgumentError as e:
        assert isinstance(e, TypeError)
        assert "Linear.forward() takes 2 positional arguments but 3 were given" in str(e)
    else:
        raise AssertionError("an extra argument was accepted")
    check_idiom(torch.nn.Linear(3, 2), lambda: (torch.randn(2, 3), torch.randn(2, 3)))


def test_idiom_errors_are_thunder_errors_of_eagers_type():
    e = check_raises(lambda a, b: a @ b, (torch.randn(2, 3), torch.randn(4, 5)), RuntimeError,
                     "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)")
    assert isinstance(e, TorchOpError) and isinstance(e, thunder_mlir.ThunderError)


def test_idiom_sparse_input_is_refused():
    check_raises(lambda x: x * 2, (torch.randn(3, 3).to_sparse(),), UnsupportedInputError,
                 "the input at args[0] is a sparse_coo tensor")


# ------------------------------------------------ area 3: code defined in strings
SCALED = """\
SCALE = 2.0
def scaled(x):
    return x * SCALE
"""


def _set_scale(value):
    def before(fn):
        fn.__globals__["SCALE"] = value
    return before


def test_idiom_global_change_in_exec_string_retraces():
    fn = _from_string(SCALED, "<string>", "scaled")
    jitted = check_idiom(fn, lambda: (torch.randn(3, requires_grad=True),),
                         steps=[Step(), Step(before=_set_scale(3.0)), Step()])
    assert thunder_mlir.cache_info(jitted)["recompile_reasons"] == [
        "global 'SCALE' changed: 2.0 -> 3.0"]


def test_idiom_global_change_in_repl_function_retraces():
    fn = _from_string(SCALED, "<stdin>", "scaled")
    check_idiom(fn, lambda: (torch.randn(3),),
                steps=[Step(), Step(before=_set_scale(-1.0)), Step(before=_set_scale(2.0))])


def test_idiom_global_change_in_notebook_cell_retraces():
    import linecache

    name = "<ipython-input-2-5eedbeefcafe>"
    linecache.cache[name] = (len(SCALED), None, SCALED.splitlines(True), name)
    try:
        fn = _from_string(SCALED, name, "scaled")
        check_idiom(fn, lambda: (torch.randn(3),), steps=[Step(), Step(before=_set_scale(5.0))])
    finally:
        linecache.cache.pop(name, None)


def test_idiom_random_in_exec_string_is_a_sharp_edge():
    fn = _from_string("import random\ndef noisy(x):\n    return x + random.random()\n",
                      "<string>", "noisy")
    check_raises(fn, (torch.zeros(2),), thunder_mlir.SharpEdgeError,
                 "<string>:3: random.random() is a non-functional call", sharp_edges="error")


def test_idiom_shape_error_in_exec_string_names_the_string_line():
    fn = _from_string("def bad(a, b):\n    return a @ b\n", "<string>", "bad")
    check_idiom(fn, lambda: (torch.randn(2, 3), torch.randn(4, 5)))
    e = check_raises(fn, (torch.randn(2, 3), torch.randn(4, 5)), RuntimeError, "mat1 and mat2")
    assert str(e).splitlines()[0] == "<string>:2"


# ------------------------------------- area 9: inputs eager refuses, once computed silently
def test_idiom_masked_fill_with_a_float_mask():
    check_idiom(lambda x, m: x.masked_fill(m, 0.0), lambda: (torch.randn(3), torch.randn(3)))


def test_idiom_sum_over_a_repeated_dim():
    check_idiom(lambda x: x.sum((1, -1)), lambda: (torch.randn(2, 3, requires_grad=True),))


def test_idiom_split_sizes_that_do_not_add_up():
    check_idiom(lambda x: torch.split(x, [2, 2], 0), lambda: (torch.randn(3, 2),))


def test_idiom_gather_with_float_indices():
    check_idiom(lambda x, i: torch.gather(x, 1, i), lambda: (torch.randn(2, 3), torch.zeros(2, 2)))


def test_idiom_max_pool_window_larger_than_input():
    check_idiom(torch.nn.MaxPool2d(5), lambda: (torch.randn(1, 1, 3, 3),))
