"""The idiom catalogue's oracle: run a program eagerly and jitted, step by step, and
compare everything a user can observe.

A *case* is a program (a function or an ``nn.Module``), a factory of fresh inputs and a
list of *steps*. Each step may change state first (a module attribute, a global, a hook,
grad mode), then calls the program on both sides. After every call the harness compares,
against eager PyTorch:

* outputs: pytree structure, values, dtypes, shapes, ``requires_grad``;
* aliasing: which outputs share storage with which inputs (a returned view of an input);
* side effects: every input tensor's value after the call (in-place writes), the module's
  ``state_dict`` (running statistics, ``num_batches_tracked``) and its plain attributes
  (``self.calls``) on every submodule;
* gradients: ``backward`` of the same random cotangents over the outputs that require grad,
  then ``.grad`` of every input leaf and every parameter (``None`` vs a tensor included);
* errors: if eager raises, the jitted call must raise the same exception type whose
  message contains eager's first line (``match_error=False`` relaxes this to the type, for
  errors thunder_mlir raises at another moment with its own wording).

``check_idiom`` returns the jitted program so a case can make further assertions (for
example on ``cache_info``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
import torch.utils._pytree as pytree

import thunder_mlir
from conftest import manual_seed

TOL = {"atol": 1e-5, "rtol": 1.3e-6}


@dataclass
class Step:
    """One call of the program. ``before(target)`` runs first on each side (the eager
    module or function, then the jitted program's original); ``grad_mode`` is the mode the
    call runs under; ``backward``: backpropagate after the call."""

    before: Callable[[Any], None] | None = None
    grad_mode: bool = True
    backward: bool = True


def _tensors(tree) -> list[torch.Tensor]:
    return [x for x in pytree.tree_leaves(tree) if isinstance(x, torch.Tensor)]


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _alias_map(outs, ins) -> list[tuple[int, ...]]:
    """For each output tensor, the indices of the input tensors sharing its storage."""
    in_ptrs = [_storage(t) for t in ins]
    return [tuple(i for i, p in enumerate(in_ptrs) if p == _storage(o) and o.numel() > 0)
            for o in outs]


def _plain_attributes(module: torch.nn.Module) -> dict[str, Any]:
    """Non-tensor, non-module attributes of every submodule (``self.calls``)."""
    out = {}
    for prefix, sub in module.named_modules():
        for k, v in vars(sub).items():
            if k.startswith("_") or isinstance(v, (torch.Tensor, torch.nn.Module)):
                continue
            if isinstance(v, (bool, int, float, str, type(None), tuple, list)):
                out[f"{prefix}.{k}" if prefix else k] = v
    return out


def _assert_close(a, e, what: str, tol) -> None:
    assert isinstance(a, torch.Tensor), f"{what}: jit gave {type(a).__name__}, eager a tensor"
    assert a.dtype == e.dtype, f"{what}: dtype {a.dtype} != eager's {e.dtype}"
    assert a.shape == e.shape, f"{what}: shape {tuple(a.shape)} != eager's {tuple(e.shape)}"
    # a NaN where eager has a NaN agrees with eager (pow_ of a negative base, log of one)
    torch.testing.assert_close(a.detach(), e.detach(), msg=lambda m: f"{what}: {m}",
                               equal_nan=True, **tol)


def _compare_outputs(actual, expected, tol) -> None:
    a_leaves, a_spec = pytree.tree_flatten(actual)
    e_leaves, e_spec = pytree.tree_flatten(expected)
    assert a_spec == e_spec, f"output structure differs:\n  jit:   {a_spec}\n  eager: {e_spec}"
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        if isinstance(e, torch.Tensor):
            _assert_close(a, e, f"output leaf {i}", tol)
            assert a.requires_grad == e.requires_grad, (
                f"output leaf {i}: requires_grad {a.requires_grad} != eager's {e.requires_grad}")
        else:
            assert type(a) is type(e) and a == e, f"output leaf {i}: {a!r} != eager's {e!r}"


def _run(program, args, kwargs, grad_mode: bool):
    with torch.set_grad_enabled(grad_mode):
        return program(*args, **kwargs)


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else ""


def check_idiom(program: Callable | torch.nn.Module, make_args: Callable[[], tuple],
                steps: Sequence[Step] = (Step(),), *, make_kwargs: Callable[[], dict] | None = None,
                jit_options: dict | None = None, tol: dict | None = None,
                match_error: bool = True):
    """Compare ``program`` eagerly and jitted over ``steps`` (see the module docstring).

    ``make_args()`` returns fresh inputs; it is called once per side per step after seeding
    torch with the step's index, so both sides get equal values. For a module, each side
    gets its own deep copy of ``program`` (the jitted side wraps its copy, and each step's
    ``before`` mutates that copy, as a user mutates the module they jitted).
    Returns the jitted program.
    """
    tol = tol or TOL
    is_module = isinstance(program, torch.nn.Module)
    eager = copy.deepcopy(program) if is_module else program
    original = copy.deepcopy(program) if is_module else program
    jitted = thunder_mlir.jit(original, **(jit_options or {}))
    for k, step in enumerate(steps):
        sides = []
        for target, runner in ((eager, eager), (original, jitted)):
            if step.before is not None:
                step.before(target)
            manual_seed(1000 + k)
            args = make_args()
            kwargs = make_kwargs() if make_kwargs is not None else {}
            ins = _tensors((args, kwargs))
            snapshot = [t.detach().clone() for t in ins]
            try:
                out = _run(runner, args, kwargs, step.grad_mode)
                err = None
            except Exception as e:  # noqa: BLE001 - compared below
                out, err = None, e
            sides.append((out, err, ins, snapshot))
        (e_out, e_err, e_ins, _), (a_out, a_err, a_ins, _) = sides
        if e_err is not None:
            assert a_err is not None, (
                f"step {k}: eager raised {type(e_err).__name__}: {_first_line(e_err)}; "
                "the jitted program returned a result")
            assert isinstance(a_err, type(e_err)), (
                f"step {k}: eager raised {type(e_err).__name__}, jit raised "
                f"{type(a_err).__name__}: {a_err}")
            if match_error:
                assert _first_line(e_err) in str(a_err), (
                    f"step {k}: error text differs:\n  eager: {_first_line(e_err)}\n"
                    f"  jit:   {a_err}")
            continue
        assert a_err is None, f"step {k}: eager succeeded, jit raised {type(a_err).__name__}: {a_err}"
        _compare_outputs(a_out, e_out, tol)
        e_outs, a_outs = _tensors(e_out), _tensors(a_out)
        assert _alias_map(a_outs, a_ins) == _alias_map(e_outs, e_ins), (
            f"step {k}: outputs alias inputs differently: jit {_alias_map(a_outs, a_ins)}, "
            f"eager {_alias_map(e_outs, e_ins)}")
        for i, (a, e) in enumerate(zip(a_ins, e_ins)):
            _assert_close(a, e, f"step {k}: input tensor {i} after the call", tol)
        if is_module:
            a_sd, e_sd = original.state_dict(), eager.state_dict()
            assert a_sd.keys() == e_sd.keys()
            for name in e_sd:
                _assert_close(a_sd[name], e_sd[name], f"step {k}: state_dict['{name}']", tol)
            assert _plain_attributes(original) == _plain_attributes(eager), (
                f"step {k}: module attributes differ:\n  jit:   {_plain_attributes(original)}"
                f"\n  eager: {_plain_attributes(eager)}")
        if step.backward:
            _compare_backward(k, e_outs, a_outs, e_ins, a_ins,
                              eager if is_module else None, original if is_module else None,
                              tol, match_error)
    return jitted


def _compare_backward(k, e_outs, a_outs, e_ins, a_ins, e_mod, a_mod, tol, match_error):
    diff = [i for i, o in enumerate(e_outs) if o.requires_grad]
    a_diff = [i for i, o in enumerate(a_outs) if o.requires_grad]
    assert diff == a_diff, f"step {k}: outputs requiring grad: jit {a_diff}, eager {diff}"
    if not diff:
        return
    g = torch.Generator().manual_seed(k)
    cots = [torch.randn(e_outs[i].shape, generator=g, dtype=e_outs[i].dtype) for i in diff]
    errors = []
    for outs in (e_outs, a_outs):
        try:
            torch.autograd.backward([outs[i] for i in diff], cots)
            errors.append(None)
        except Exception as e:  # noqa: BLE001 - compared below
            errors.append(e)
    e_err, a_err = errors
    if e_err is not None:
        assert a_err is not None, (f"step {k}: eager's backward raised {type(e_err).__name__}: "
                                   f"{_first_line(e_err)}; jit's did not")
        assert isinstance(a_err, type(e_err)), (
            f"step {k}: backward: eager raised {type(e_err).__name__}, jit {type(a_err).__name__}: {a_err}")
        if match_error:
            assert _first_line(e_err) in str(a_err), (
                f"step {k}: backward error differs:\n  eager: {_first_line(e_err)}\n  jit:   {a_err}")
        return
    assert a_err is None, f"step {k}: eager's backward ran, jit's raised {a_err!r}"
    pairs = [(f"input tensor {i}", a, e) for i, (a, e) in enumerate(zip(a_ins, e_ins))]
    if e_mod is not None:
        a_params = dict(a_mod.named_parameters())
        pairs += [(f"parameter '{n}'", a_params[n], p) for n, p in e_mod.named_parameters()]
    for what, a, e in pairs:
        if e.grad is None:
            assert a.grad is None, f"step {k}: {what}: eager has no .grad, jit has one"
        else:
            assert a.grad is not None, f"step {k}: {what}: jit has no .grad, eager has one"
            _assert_close(a.grad, e.grad, f"step {k}: {what}.grad", tol)
    for _, a, e in pairs:
        a.grad = e.grad = None


def check_raises(program: Callable, args: tuple, exc_type: type[BaseException], match: str,
                 **jit_options) -> BaseException:
    """The jitted ``program(*args)`` raises ``exc_type`` whose message contains ``match``
    (for programs thunder_mlir refuses on purpose, where eager would run). Returns it."""
    jitted = thunder_mlir.jit(program, **jit_options)
    try:
        jitted(*args)
    except exc_type as e:
        assert match in str(e), f"error text lacks {match!r}:\n{e}"
        return e
    raise AssertionError(f"expected {exc_type.__name__} containing {match!r}; the call returned")
