"""The in-place ops of PyTorch's own registry, for the differential fuzzer.

Every ``OpInfo`` of ``torch.testing._internal.common_methods_invocations.op_db`` with an
``inplace_variant`` and float32 support contributes up to ``SAMPLES_PER_OP`` of its sample
inputs (drawn once, under a fixed seed, so the table and the programs drawn from it are the
same in every run). A sample's non-tensor arguments and its integer and bool tensors
(indices, masks) are kept as they are; its float tensors are replaced by values of the
fuzzer's pool, so gradients flow through them. An entry is usable

* on a view (``views``): its float tensors all have the sample input's shape (elementwise
  ops: ``add_``, ``clamp_``, ``lerp_``...) or there are none (``sin_``, ``tril_``,
  ``renorm_``...): it is then applied to every view of ``fuzz_programs.VIEWS`` on which it
  runs;
* ``native``: on an intermediate of the sample's own shape (``scatter_``, ``index_add_``,
  ``masked_scatter_``, ``addmm_``...).

Values go through a bounded domain map (``DOMAINS``) chosen per entry so that eager's result
and gradients are finite; entries are checked here, eagerly, before the fuzzer draws them:
the in-place call returns its input with the input's shape and strides, it is deterministic
(random ops such as ``uniform_`` or ``dropout`` are left out by this check), and forward and
backward give finite values. Ops whose result is not defined for repeated indices
(``scatter_``, ``index_copy_``, ``index_put_`` and ``put_`` without accumulation) are left
out: eager itself leaves the winner unspecified. ``EXCLUDED`` holds every entry left out
and why.
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass
from typing import Callable

import torch

SAMPLES_PER_OP = 2

DOMAINS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "real": lambda t: torch.tanh(t) * 2,
    "unit": lambda t: torch.sigmoid(t) * 0.9 + 0.05,
    "above1": lambda t: torch.sigmoid(t) + 1.1,
}

# Writes whose result eager leaves unspecified when an index repeats.
_UNORDERED_WRITES = {"scatter", "index_copy", "index_put", "put"}

EXCLUDED: dict[str, str] = {}
# i0, polygamma, mvlgamma and tan (near its poles) grow fast: the fuzzer saw 3e-6 to 4e-6
# relative differences downstream of them (two correct float32 programs, rounding
# differently)
_STEEP = {"i0", "polygamma", "mvlgamma", "special.i0e", "special.i1", "lgamma", "digamma",
          "tan"}
# the gradient of a product divides it by each factor (derivatives.yaml, scatter_reduce
# "prod"): of the fuzzer's growing values (x^4 times 2) XLA's product rounds otherwise than
# ATen's, 1.4e-5 relative where assert_close allows 1.3e-6 (fuzzer programs 191-194 of the
# run after the zeros_like target joined; the jit's gradient 2-5x eager's distance from
# float64, both within 3e-6); tests/test_grad_numerics.py checks its gradients
_ROUNDING = {"scatter_reduce.prod"}
# reciprocal of the "real" domain's values near 0 grows as 1/x: a CI run's fuzzer program
# (sin, then reciprocal_ of a row of the base, then square) differed from eager by 2.3e-6
# relative in one gradient element of 12 where assert_close allows 1.3e-6, and the same
# program matched eager on the same tree in another run (XLA's thread count changes its
# float32 rounding); its values are drawn away from 0 instead
_FIRST_DOMAIN = {"reciprocal": "above1"}
_RANDOM = {"nn.functional.rrelu", "bernoulli", "normal", "uniform", "exponential",
           "geometric", "cauchy", "log_normal", "random"}


def adapt(t: torch.Tensor, shape) -> torch.Tensor:
    """``t``'s values laid out in ``shape`` (repeated or cut), differentiably."""
    shape = tuple(shape)
    n = math.prod(shape)
    flat = t.reshape(-1)
    if flat.numel() == 0:
        return t.new_zeros(shape)
    if n > flat.numel():
        flat = flat.repeat(-(-n // flat.numel()))
    return flat[:n].reshape(shape)


@dataclass(frozen=True)
class Marker:
    """A float tensor argument: filled with a pool value in ``shape`` (None: the target's)."""

    shape: tuple | None


@dataclass(frozen=True)
class Const:
    """An integer or bool tensor of a sample (an index, a mask), rebuilt inside the program
    from Python values: a tensor captured from outside would be a closure constant."""

    values: tuple
    dtype: torch.dtype
    shape: tuple

    def make(self) -> torch.Tensor:
        return torch.tensor(self.values, dtype=self.dtype).reshape(self.shape)


@dataclass
class Entry:
    key: str
    fn: Callable
    args: tuple
    kwargs: dict
    domain: str
    native_shape: tuple | None  # None: usable on views
    views: tuple = ()
    fallback_only: bool = False


def _fill(a, target, y, dom):
    if isinstance(a, Marker):
        return dom(adapt(y, target.shape if a.shape is None else a.shape))
    if isinstance(a, Const):
        return a.make()
    if isinstance(a, (list, tuple)) and not isinstance(a, torch.Size):
        return type(a)(_fill(e, target, y, dom) for e in a)
    return a


def apply(entry: Entry, target: torch.Tensor, y: torch.Tensor):
    """``entry``'s in-place op on ``target``, its float tensors made from ``y``."""
    dom = DOMAINS[entry.domain]
    args = tuple(_fill(a, target, y, dom) for a in entry.args)
    kwargs = {k: _fill(v, target, y, dom) for k, v in entry.kwargs.items()}
    return entry.fn(target, *args, **kwargs)


def _template(sample):
    """(args, kwargs, elementwise): float tensors become Markers."""
    shape = tuple(sample.input.shape)
    elementwise = True

    def mark(a):
        nonlocal elementwise
        if isinstance(a, torch.Tensor) and a.is_floating_point():
            if tuple(a.shape) != shape:
                elementwise = False
            return Marker(tuple(a.shape))
        if isinstance(a, torch.Tensor):
            elementwise = False
            return Const(tuple(a.reshape(-1).tolist()), a.dtype, tuple(a.shape))
        if isinstance(a, (list, tuple)) and any(isinstance(e, torch.Tensor) for e in a):
            elementwise = False
            return type(a)(mark(e) for e in a)
        return a
    args = tuple(mark(a) for a in sample.args)
    kwargs = {k: mark(v) for k, v in sample.kwargs.items()}
    if elementwise:  # float tensors take the target's (view's) shape
        args = tuple(Marker(None) if isinstance(a, Marker) else a for a in args)
        kwargs = {k: Marker(None) if isinstance(v, Marker) else v for k, v in kwargs.items()}
    return args, kwargs, elementwise


def run_entry(entry: Entry, x: torch.Tensor, y: torch.Tensor, view: Callable | None):
    """Eager: the write on an intermediate made from ``x`` (through ``view`` unless
    native); returns the written base."""
    dom = DOMAINS[entry.domain]
    if entry.native_shape is not None:
        base = dom(adapt(x, entry.native_shape))
        target = base
    else:
        base = dom(x * 1.0)
        target = view(base)
    shape, stride = target.shape, target.stride()
    out = apply(entry, target, y)
    if out is not target or out.shape != shape or out.stride() != stride:
        raise ValueError("changes metadata")
    return base


# Values and gradients past this are not drawn: float32 rounding of two correct programs
# then differs by more than assert_close's relative tolerance in what the program computes
# next (i0, polygamma, mvlgamma: 3e-6 to 4e-6 seen), where the OpInfo harnesses compare
# both against float64 instead (tests/test_opinfo.py)
_LARGEST = 100.0


def _usable(entry: Entry, view: Callable | None, seeds=(0, 1, 2), determinism=False) -> bool:
    for seed in seeds:
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(3, 4, generator=g).requires_grad_()
        y = torch.randn(3, 4, generator=g).requires_grad_()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                base = run_entry(entry, x, y, view)
                if determinism and not torch.equal(base, run_entry(entry, x, y, view)):
                    return False
                if not base.isfinite().all() or base.abs().max() > _LARGEST:
                    return False
                if base.requires_grad:
                    gx, gy = torch.autograd.grad((base * base.detach().sign()).sum(), (x, y),
                                                 allow_unused=True)
                    for gr in (gx, gy):
                        if gr is not None and (not gr.isfinite().all() or
                                               gr.abs().max() > _LARGEST):
                            return False
        except Exception:  # noqa: BLE001 - an entry eager cannot run here is not drawn
            return False
    return True


def _runs_on_fallback(entry: Entry) -> bool:
    """Whether ``thunder_mlir.examine`` reports the in-place op of ``entry`` (applied to a
    whole (3, 4) intermediate) as run by the torch fallback."""
    import thunder_mlir

    def program(x, y):
        t = DOMAINS[entry.domain](x * 1.0)
        apply(entry, t, y)
        return t
    try:
        ex = thunder_mlir.examine(program, torch.randn(3, 4), torch.randn(3, 4))
    except Exception:  # noqa: BLE001 - refused while tracing: not a fallback writer
        return False
    name = getattr(entry.fn, "__name__", "?")
    return any(r.name.endswith("." + name) for r in ex.fallback_ops)


@functools.lru_cache(maxsize=None)
def table() -> dict[str, Entry]:
    """key -> Entry, for every usable sample of every in-place OpInfo."""
    from torch.testing._internal.common_methods_invocations import op_db

    import fuzz_programs as fp

    out = {}
    with torch.random.fork_rng(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        for o in op_db:
            if o.inplace_variant is None:
                continue
            name = f"{o.name}.{o.variant_test_name}" if o.variant_test_name else o.name
            if torch.float32 not in o.supported_dtypes("cpu"):
                EXCLUDED[name] = "no float32 on CPU"
                continue
            if o.name in _STEEP or name in _ROUNDING:
                EXCLUDED[name] = ("its values grow fast: float32 rounding of what follows "
                                  "differs past assert_close's rtol (compared against "
                                  "float64 in tests/test_opinfo.py instead)")
                continue
            if "dropout" in o.name or o.name in _RANDOM:
                # a sample's seed does not fix the values: thunder_mlir draws other numbers
                # than torch (docs/architecture.md, "Random numbers"); tests/test_random.py
                # checks these ops by their distributions
                EXCLUDED[name] = "draws random numbers"
                continue
            try:
                # the sample function itself: OpInfo.sample_inputs inspects the stack
                samples = list(o.sample_inputs_func(o, "cpu", torch.float32, False))
            except Exception as e:  # noqa: BLE001
                EXCLUDED[name] = f"sample_inputs raised {type(e).__name__}"
                continue
            fn = o.inplace_variant
            kept = 0
            for i, sample in enumerate(samples):
                if kept == SAMPLES_PER_OP:
                    break
                if not isinstance(sample.input, torch.Tensor):
                    continue
                args, kwargs, elementwise = _template(sample)
                key = f"{name}#{i}"
                ordered = (kwargs.get("accumulate") or "reduce" in kwargs
                           or (len(args) > 2 and args[2] is True))
                if o.name in _UNORDERED_WRITES and not ordered:
                    EXCLUDED[key] = "result unspecified by eager for repeated indices"
                    continue
                found = None
                first = _FIRST_DOMAIN.get(o.name)
                for domain in ([first] if first else []) + [d for d in DOMAINS if d != first]:
                    if elementwise:
                        e = Entry(key, fn, args, kwargs, domain, None, )
                        views = tuple(v for v in sorted(fp.VIEWS)
                                      if _usable(e, fp.VIEWS[v], (0,)))
                        views = tuple(v for v in views if _usable(e, fp.VIEWS[v], (1,)))
                        if views and not _usable(e, fp.VIEWS[views[0]], (2,), True):
                            views = ()
                        if views:
                            e.views = views
                            found = e
                            break
                    else:
                        e = Entry(key, fn, args, kwargs, domain, tuple(sample.input.shape),
                                  )
                        if (sample.input.numel() > 0 and _usable(e, None, (0,))
                                and _usable(e, None, (1, 2), True)):
                            found = e
                            break
                if found is None:
                    EXCLUDED[key] = ("eager cannot run it with finite values and gradients, "
                                     "deterministically and without changing its metadata")
                    continue
                out[key] = found
                kept += 1
        for e in out.values():
            if e.native_shape is None and "id" in e.views:
                e.fallback_only = _runs_on_fallback(e)
    return out


def view_entries() -> list[str]:
    return sorted(k for k, e in table().items() if e.native_shape is None)


def native_entries() -> list[str]:
    return sorted(k for k, e in table().items() if e.native_shape is not None)


def fallback_writers() -> list[str]:
    """Entries usable on the whole (3, 4) tensor that only the torch fallback runs."""
    return sorted(k for k, e in table().items()
                  if e.native_shape is None and e.fallback_only and "id" in e.views)


def describe() -> str:
    t = table()
    return (f"{len(t)} op_db in-place entries ({len(view_entries())} on views, "
            f"{len(native_entries())} native, {len(fallback_writers())} fallback-only "
            f"writers), {len(EXCLUDED)} left out")

