"""Symbolic sizes: the ``?`` dimensions of a program traced once for many shapes.

A dynamic dimension of an input is a *symbol* ``s<k>`` (a positive integer, at least 2:
sizes 0 and 1 stay static, as torch.compile specializes them); a data-dependent output
size (``ShapeEnv.new_unbacked``) is a symbol of at least 0. Sizes computed from it are
``SymInt`` objects: a sympy expression over the symbols plus its *hint*, the value at the
call that was traced. Arithmetic (+, -, *, //, %) gives SymInts; a comparison whose result
the expression does not settle by itself (``s0 == s1``, ``s0 > 4``) is answered from the
hints and recorded as a *guard*: the compiled program is used only for calls whose sizes
give every guard the same answer (torch.compile's ShapeEnv, ``torch/fx/experimental/
symbolic_shapes.py``, works the same way). Conversions to a Python ``int`` (``range(n)``,
``int(n)``, a list index) cannot stay symbolic: they raise ``DynamicShapeFallback`` and
the function is compiled for static shapes instead, with that reason recorded.

In the IR a symbolic dimension is ``?`` in the tensor type; the expression of every
dimension of an op's result rides on the op as the discardable attribute ``thunder.shape``
(one string per dimension, ``"s0"``, ``"64*s0"``, ``"128"``), and those of the program's
arguments on ``@computation`` as ``thunder.arg_shapes``. The lowering turns the
expressions a shape operand needs into StableHLO arithmetic on
``stablehlo.get_dimension_size`` of the arguments (``thunder_mlir.ir.hlo_dynamic``).
"""

from __future__ import annotations

import functools
import numbers
import operator
from typing import Any, Callable, Sequence

import torch


class _LazySympy:
    """sympy, imported at its first use (it takes seconds to import; only programs with
    symbolic sizes need it): the first attribute read replaces this module global."""

    def __getattr__(self, name: str):
        import sympy as module

        globals()["sympy"] = module
        return getattr(module, name)


sympy = _LazySympy()

from thunder_mlir.errors import DynamicShapeFallback

SHAPE_ATTR = "thunder.shape"          # per op result: the expression of each dim
ARG_SHAPES_ATTR = "thunder.arg_shapes"  # on @computation: the expression of each arg dim
SYM_ATTR_PREFIX = "thunder.sym."      # thunder.sym.<field>: expressions of an INTS field
# on an executor call with symbolic result sizes (unbacked sizes of a data-dependent op):
# per result, the expression of each dim
RESULT_SHAPES_ATTR = "thunder.result_shapes"
# on such an executor call (value_guards.slice_by_value): result 0 is a prefix slice of
# operand 0 (``x[:n]`` along each sliced dim, the others whole), so each of its symbolic
# sizes is at most operand 0's size there (runtime/bounded_shapes.py reads it as a bound)
PREFIX_SLICE_ATTR = "thunder.prefix_slice"


@functools.lru_cache(maxsize=None)
def symbol(k: int) -> sympy.Symbol:
    """The k-th size symbol ``s<k>``. Its sympy assumption says positive, which a
    data-dependent size (at least 0, ``ShapeEnv.new_unbacked``) does not meet: the shape
    reasoning is ``_sign``'s, and guards are built unevaluated (``ShapeEnv.decide``)."""
    return sympy.Symbol(f"s{k}", integer=True, positive=True)


def symbol_number(expr: sympy.Expr) -> int | None:
    """k for the size symbol ``s<k>``; None for any other expression."""
    if not expr.is_Symbol or not expr.name.startswith("s") or not expr.name[1:].isdigit():
        return None
    return int(expr.name[1:])


def _shifted(expr: sympy.Expr, zero_based: frozenset = frozenset()) -> sympy.Expr:
    """``expr`` with every symbol s written t + 2, t >= 0 (a symbol is at least 2), or t
    for a symbol of ``zero_based`` (at least 0: a data-dependent size,
    ``ShapeEnv.new_unbacked``)."""
    subs = {s: sympy.Symbol(f"t_{s.name}", integer=True, nonnegative=True)
            + (0 if s in zero_based else 2) for s in expr.free_symbols}
    return sympy.expand(expr.subs(subs))


@functools.lru_cache(maxsize=4096)
def _sign(expr: sympy.Expr, zero_based: frozenset = frozenset()) -> int | None:
    """+1 when ``expr`` > 0 for every size, -1 when < 0, 0 when == 0, None if it depends.
    Every symbol is at least 2, those of ``zero_based`` at least 0."""
    expr = sympy.expand(expr)
    if expr.is_number:
        return int(bool(expr > 0)) - int(bool(expr < 0))
    try:
        poly = sympy.Poly(_shifted(expr, zero_based))
    except sympy.PolynomialError:
        return None  # floor/Mod terms: left to a guard
    coeffs = poly.coeffs()
    const = poly.as_expr().subs({g: 0 for g in poly.gens})
    if all(bool(c >= 0) for c in coeffs) and bool(const > 0):
        return 1
    if all(bool(c <= 0) for c in coeffs) and bool(const < 0):
        return -1
    return None


_RELATIONS = {"==": (operator.eq, "Eq"), "!=": (operator.ne, "Ne"), "<": (operator.lt, "Lt"),
              "<=": (operator.le, "Le"), ">": (operator.gt, "Gt"), ">=": (operator.ge, "Ge")}


_NEGATED = {"==": "!=", "!=": "==", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


class ShapeEnv:
    """The symbols and guards of one trace.

    ``sources[k]``: (tensor input index, dim) whose size symbol ``s<k>`` is, or None for an
    *unbacked* symbol: the size of a data-dependent op's output (``nonzero``,
    ``masked_select``, ...), known only when the op has run (torch's unbacked SymInts,
    ``torch/fx/experimental/symbolic_shapes.py``). The input symbols come first
    (``input_sources``), the unbacked ones are made while tracing. ``hints[k]``: its size
    at the traced call; ``guards``: (relation text, sympy relational, value) for every
    comparison decided from hints; ``reasons``: why each symbol exists (mark_dynamic,
    dynamic=True, automatic, the data-dependent op)."""

    def __init__(self):
        self.sources: list[tuple[int, int] | None] = []
        self.hints: list[int] = []
        self.reasons: list[str] = []
        self.guards: list[tuple[str, Any, bool]] = []
        self._hint_cache: dict[sympy.Expr, int] = {}
        # unbacked symbols that stand for a Python int read from a tensor (``t.item()``),
        # not for a size: used by a tensor op, they are specialized (``SymInt.pin``)
        self.value_symbols: set = set()
        # the unbacked size symbols (data-dependent output sizes): at least 0, where every
        # other symbol is at least 2 (sizes 0 and 1 of an input, and a ``.item()`` value
        # below 2, stay specialized as torch.compile specializes them)
        self.zero_based: frozenset = frozenset()

    def new_symbol(self, source: tuple[int, int], hint: int, reason: str) -> "SymInt":
        """A new size symbol s<k> for dim ``source`` = (tensor index, dim) whose size at the traced
        call is ``hint``; ``reason`` says why it is symbolic (cache_info)."""
        if self.unbacked:
            raise AssertionError("input size symbols are made before unbacked ones")
        k = len(self.sources)
        self.sources.append(source)
        self.hints.append(int(hint))
        self.reasons.append(reason)
        return SymInt(symbol(k), self)

    def new_unbacked(self, hint: int, reason: str, *, zero_based: bool = True) -> "SymInt":
        """A new unbacked size symbol s<k>: an output size of a data-dependent op that was
        ``hint`` at the traced call; ``reason`` names the op and its line.

        ``zero_based``: the symbol stands for every size >= 0 (torch.compile does not
        specialize unbacked sizes at 0 and 1): any decision that depends on its being 0, 1
        or more (``numel() == 1``, a broadcast against it) is answered from the hint and
        recorded as a guard, checked where the op runs (``unbacked_check``). Else (a
        ``.item()`` value, ``new_value``) it stands for values >= 2 and ``hint`` must be
        at least 2. Raises ValueError for a hint out of that range."""
        if hint < (0 if zero_based else 2):
            raise ValueError(f"an unbacked symbol stands for values >= "
                             f"{0 if zero_based else 2}, got {hint}")
        k = len(self.sources)
        self.sources.append(None)
        self.hints.append(int(hint))
        self.reasons.append(reason)
        if zero_based:
            self.zero_based = self.zero_based | {symbol(k)}
        return SymInt(symbol(k), self)

    def new_value(self, hint: int, reason: str) -> "SymInt":
        """A new unbacked symbol s<k> for a Python int read from a tensor's data
        (``t.item()`` of an integer tensor) that was ``hint`` (at least 2) at the traced
        call: symbolic in comparisons (guards) and integer arithmetic, and specialized to
        its value (a guard ``s<k> == hint``) wherever anything else reads it
        (``SymInt.pin``). torch.compile's ``capture_scalar_outputs`` unbacked SymInt."""
        out = self.new_unbacked(hint, reason, zero_based=False)
        self.value_symbols.add(out.expr)
        return out

    @property
    def input_sources(self) -> list[tuple[int, int]]:
        """The (tensor index, dim) of each input symbol (s0, s1, ... before the unbacked)."""
        return [s for s in self.sources if s is not None]

    @property
    def unbacked(self) -> list[int]:
        """The numbers k of the unbacked symbols s<k>."""
        return [k for k, s in enumerate(self.sources) if s is None]

    def all_unbacked(self, expr: sympy.Expr) -> bool:
        """Whether ``expr`` has symbols and all of them are unbacked."""
        unbacked = {symbol(k) for k in self.unbacked}
        return bool(expr.free_symbols) and expr.free_symbols <= unbacked

    def guards_of(self, ks: Sequence[int]) -> list[tuple[str, Any, bool]]:
        """The guards that mention one of the symbols s<k> for k in ``ks``."""
        syms = {symbol(k) for k in ks}
        return [g for g in self.guards if g[1].free_symbols & syms]

    def unbacked_check(self, ks: Sequence[int]) -> Callable[[Sequence[int]], bool]:
        """``check(sizes)`` for the unbacked symbols s<k>, k in ``ks`` (one data-dependent
        op's, in that order): True when each is in its range (>= 0 for a size, >= 2 for a
        ``.item()`` value, ``new_unbacked``) and every guard that mentions them holds. The
        guards must mention no other symbol (``check_unbacked_guards``)."""
        syms = [symbol(k) for k in ks]
        lows = [0 if s in self.zero_based else 2 for s in syms]
        terms = [rel if value else sympy.Not(rel) for _, rel, value in self.guards_of(ks)]
        # (one function per guard, not sympy.And: And would simplify the relations with the
        # symbols' sympy assumptions, which say positive)
        bodies = [sympy.lambdify(syms, t, "math") for t in terms]

        def check(sizes: Sequence[int]) -> bool:
            return all(s >= low for s, low in zip(sizes, lows)) and \
                all(bool(body(*sizes)) for body in bodies)
        return check

    def check_unbacked_guards(self, groups: Sequence[Sequence[int]]) -> None:
        """Raise DynamicShapeFallback where a guard relates the unbacked symbols of one
        data-dependent op (``groups``: the symbol numbers of each op) to any other symbol:
        such a guard could only be checked once both sizes are known, and the program is
        then specialized on the values instead."""
        for ks in groups:
            mine = {symbol(k) for k in ks}
            for text, rel, _ in self.guards_of(ks):
                if not rel.free_symbols <= mine:
                    raise DynamicShapeFallback(
                        f"the guard {text} relates a data-dependent size to another size; "
                        "the program is specialized on the values instead")

    def hint_of(self, expr: sympy.Expr) -> int:
        """The value of ``expr`` at the traced call's sizes (an int; cached per expression)."""
        h = self._hint_cache.get(expr)
        if h is None:
            h = self._hint_cache[expr] = int(expr.xreplace(
                {symbol(k): sympy.Integer(n) for k, n in enumerate(self.hints)}))
        return h

    def decide(self, op: str, a: sympy.Expr, b: sympy.Expr) -> bool:
        """The truth of ``a <op> b``: settled by the expressions when they do, else by the
        hints, recorded as a guard."""
        py, _ = _RELATIONS[op]
        diff = a - b
        # (the zero-based symbols of this expression alone: _sign's cache key)
        sign = _sign(diff, self.zero_based & diff.free_symbols if self.zero_based
                     else frozenset())
        if sign is not None:
            return py(sign, 0)
        value = bool(py(self.hint_of(a), self.hint_of(b)))
        held = op if value else _NEGATED[op]  # the relation that holds, recorded as is
        text = f"{a} {held} {b}"
        if not any(t == text for t, _, _ in self.guards):
            relation = getattr(sympy, _RELATIONS[held][1])
            # unevaluated: sympy would settle s == 0 as False from the symbol's assumption
            # (positive), which a zero-based symbol (new_unbacked) does not meet
            self.guards.append((text, relation(a, b, evaluate=False), True))
        return value

    def guard_function(self) -> Callable[[Sequence], bool] | None:
        """``check(sizes)``: True when the sizes (one per input symbol) satisfy every guard
        of input symbols alone and are all >= 2; None when the program has no input
        symbol."""
        n = len(self.input_sources)
        if not n:
            return None
        syms = [symbol(k) for k in range(n)]
        unbacked = {symbol(k) for k in self.unbacked}
        terms = [rel if value else sympy.Not(rel) for _, rel, value in self.guards
                 if not rel.free_symbols & unbacked]  # (checked where the op runs)
        body = sympy.lambdify(syms, sympy.And(*terms) if terms else sympy.true, "math")

        def check(sizes: Sequence[int]) -> bool:
            return all(s >= 2 for s in sizes) and bool(body(*sizes))
        return check

    def describe_guards(self) -> list[str]:
        """The recorded shape guards as text, negated where the traced call took the false side."""
        return [text if value else f"not ({text})" for text, _, value in self.guards]


def slice_indices(ix: slice, size) -> tuple:
    """``ix.indices(size)`` (Python's rules: (start, stop, step), the bounds clamped to
    [0, size]) for a size and bounds that may be SymInts: each comparison is decided as
    ``decide`` does (a guard where the expressions do not settle it). A step <= 0 gives
    (0, 0, step), for the caller to reject; the step must be an int."""
    if not any(type(v) is SymInt for v in (ix.start, ix.stop, size)):
        return ix.indices(size)
    step = 1 if ix.step is None else int(ix.step)
    if step <= 0:
        return 0, 0, step

    def clamp(v, default):
        if v is None:
            return default
        if type(v) is not SymInt:
            v = int(v)
        return max(v + size, 0) if v < 0 else min(v, size)
    return clamp(ix.start, 0), clamp(ix.stop, size), step


def _expr(x) -> sympy.Expr:
    return x.expr if type(x) is SymInt else sympy.Integer(int(x))


def _make(expr: sympy.Expr, env: ShapeEnv):
    expr = sympy.expand(expr) if not expr.has(sympy.floor, sympy.Mod) else expr
    return int(expr) if expr.is_number else SymInt(expr, env)


def _fallback(what: str):
    raise DynamicShapeFallback(
        f"{what} of a symbolic size needs its value as a Python int; the program is "
        "compiled for static shapes instead")


# (t, n) -> torch.<name>(t, n) for a tensor operand t of a SymInt n's arithmetic or
# comparison: torch's argument parser refuses a SymInt before __torch_function__, so Python
# falls back to the SymInt's reflected method. The frontend's dispatch registers it.
_TENSOR_OPERAND: list = []


def register_tensor_operand(fn) -> None:
    """Install ``fn(name, tensor, symint)``, which traces ``torch.<name>(tensor, symint)``."""
    _TENSOR_OPERAND[:] = [fn]


def _tensor_op(name: str, t, n):
    if not _TENSOR_OPERAND:
        return NotImplemented
    return _TENSOR_OPERAND[0](name, t, n)


# s <op> t  ==  t <reflected op> s
_PY_BINARY = {"__add__": operator.add, "__sub__": operator.sub, "__mul__": operator.mul,
              "__floordiv__": operator.floordiv, "__mod__": operator.mod,
              "__pow__": pow, "__and__": operator.and_, "__or__": operator.or_,
              "__xor__": operator.xor, "__lshift__": operator.lshift,
              "__rshift__": operator.rshift, "__divmod__": divmod}
_PY_REFLECTED = {"__rsub__": operator.sub, "__rfloordiv__": operator.floordiv,
                 "__rmod__": operator.mod, "__rpow__": pow, "__rand__": operator.and_,
                 "__ror__": operator.or_, "__rxor__": operator.xor,
                 "__rlshift__": operator.lshift, "__rrshift__": operator.rshift,
                 "__rdivmod__": divmod}
_REFLECTED = {"==": "eq", "!=": "ne", "<": "gt", "<=": "ge", ">": "lt", ">=": "le"}


class SymInt:
    """A size computed from size symbols: an int-like object (``expr``: sympy expression;
    ``hint``: its value at the traced call). Arithmetic with ints and SymInts gives
    SymInts (or ints when the result is constant); comparisons give bools and record
    guards (ShapeEnv.decide); ``int()``/``__index__`` raise DynamicShapeFallback."""

    __slots__ = ("expr", "env")

    def __init__(self, expr: sympy.Expr, env: ShapeEnv):
        self.expr, self.env = expr, env

    @property
    def hint(self) -> int:
        """The size's value at the traced call (int)."""
        return self.env.hint_of(self.expr)

    def __add__(self, o):
        if isinstance(o, torch.Tensor):
            return _tensor_op("add", o, self)
        return _make(self.expr + _expr(o), self.env) if _is_int(o) \
            else self._int_op("__add__", o)

    def __radd__(self, o):
        return self.__add__(o)

    def __sub__(self, o):
        if isinstance(o, torch.Tensor):
            return _tensor_op("rsub", o, self)
        return _make(self.expr - _expr(o), self.env) if _is_int(o) \
            else self._int_op("__sub__", o)

    def __rsub__(self, o):
        if isinstance(o, torch.Tensor):
            return _tensor_op("sub", o, self)
        return _make(_expr(o) - self.expr, self.env) if _is_int(o) \
            else self._int_op("__rsub__", o)

    def __mul__(self, o):
        if isinstance(o, torch.Tensor):
            return _tensor_op("mul", o, self)
        return _make(self.expr * _expr(o), self.env) if _is_int(o) \
            else self._int_op("__mul__", o)

    def __rmul__(self, o):
        return self.__mul__(o)

    def __neg__(self):
        return _make(-self.expr, self.env)

    def __pos__(self):
        return self

    def _divisor(self, d: sympy.Expr) -> sympy.Expr:
        """``d``, a divisor, checked nonzero: Python raises ZeroDivisionError for 0, as the
        user's code would (a guard ``d != 0`` where a data-dependent size may be 0)."""
        if self.env.decide("==", d, sympy.Integer(0)):
            raise ZeroDivisionError("integer division or modulo by zero")
        return d

    def __floordiv__(self, o):
        if not _is_int(o):
            return self._int_op("__floordiv__", o)
        return _make(sympy.floor(self.expr / self._divisor(_expr(o))), self.env)

    def __rfloordiv__(self, o):
        return _make(sympy.floor(_expr(o) / self._divisor(self.expr)), self.env) \
            if _is_int(o) else self._int_op("__rfloordiv__", o)

    def __mod__(self, o):
        return _make(sympy.Mod(self.expr, self._divisor(_expr(o))), self.env) \
            if _is_int(o) else self._int_op("__mod__", o)

    def __rmod__(self, o):
        return _make(sympy.Mod(_expr(o), self._divisor(self.expr)), self.env) \
            if _is_int(o) else self._int_op("__rmod__", o)

    def _cmp(self, op, o):
        if isinstance(o, torch.Tensor):
            return _tensor_op(_REFLECTED[op], o, self)
        if not _is_int(o):  # (a value symbol compared with a float: its value's answer)
            return _RELATIONS[op][0](self.pin(), o) \
                if self.is_value() and isinstance(o, numbers.Number) else NotImplemented
        return self.env.decide(op, self.expr, _expr(o))

    def __eq__(self, o):
        return self._cmp("==", o)

    def __ne__(self, o):
        return self._cmp("!=", o)

    def __lt__(self, o):
        return self._cmp("<", o)

    def __le__(self, o):
        return self._cmp("<=", o)

    def __gt__(self, o):
        return self._cmp(">", o)

    def __ge__(self, o):
        return self._cmp(">=", o)

    def __bool__(self):
        return self.env.decide("!=", self.expr, sympy.Integer(0))

    def __hash__(self):  # (a value symbol: an int's hash, so that {7: a}[k] finds it)
        return hash(self.pin()) if self.is_value() else hash(self.expr)

    def __getattr__(self, name: str):
        """A value symbol's other int attributes (``k.bit_length()``, ``k.real``): the
        pinned value's."""
        if name.startswith("__") or name in ("expr", "env") or not self.is_value():
            raise AttributeError(name)
        return getattr(self.pin(), name)

    def __int__(self):
        return self._specialized("int()")

    def __index__(self):
        return self._specialized("using as an index (range, slicing a list, ...)")

    def __float__(self):
        return float(self._specialized("float()"))

    def _specialized(self, what: str) -> int:
        """A size made of unbacked symbols alone (a data-dependent op's output size) read as
        a Python int: its traced value, with the guard ``expr == value`` (checked where the
        op runs, as torch specializes a size converted to an int). Any other symbolic size:
        DynamicShapeFallback (the program is compiled for static shapes)."""
        if not self.env.all_unbacked(self.expr):
            _fallback(what)
        value = self.hint
        self.env.decide("==", self.expr, sympy.Integer(value))
        return value

    def __truediv__(self, o):
        if self.is_value():
            return self.pin() / o
        _fallback("true division")

    def __rtruediv__(self, o):
        if self.is_value():
            return o / self.pin()
        _fallback("true division")

    def is_value(self) -> bool:
        """Whether this holds a Python int read from a tensor (``ShapeEnv.new_value``)."""
        return bool(self.env.value_symbols) and \
            not self.expr.free_symbols.isdisjoint(self.env.value_symbols)

    def pin(self) -> int:
        """Its value at the traced call, with the guard ``expr == value``: what an int read
        from a tensor becomes where a tensor op, a float, or any operation other than a
        comparison or integer arithmetic reads it (the program is then valid for that value
        alone, as a value guard makes it)."""
        return self._specialized("its value")

    def __str__(self):
        return str(self.pin()) if self.is_value() else _text(self.expr)

    def __format__(self, spec):
        return format(self.pin(), spec) if self.is_value() else format(str(self), spec)

    def _int_op(self, name: str, *others):
        """Python's ``name`` operation (``__add__``, ``__rpow__``, ...) on the pinned value
        (a value symbol, ``pin``) and ``others``; else NotImplemented (Python's TypeError,
        as before)."""
        if not self.is_value():
            return NotImplemented
        v = self.pin()
        others = [o.pin() if type(o) is SymInt else o for o in others]
        if name in _PY_BINARY:
            return _PY_BINARY[name](v, *others)
        if name in _PY_REFLECTED:
            return _PY_REFLECTED[name](others[0], v)
        return getattr(v, name)(*others)

    def __pow__(self, o, mod=None):
        return self._int_op("__pow__", o) if mod is None else self._int_op("__pow__", o, mod)

    def __rpow__(self, o):
        return self._int_op("__rpow__", o)

    def __and__(self, o):
        return self._int_op("__and__", o)

    def __rand__(self, o):
        return self._int_op("__rand__", o)

    def __or__(self, o):
        return self._int_op("__or__", o)

    def __ror__(self, o):
        return self._int_op("__ror__", o)

    def __xor__(self, o):
        return self._int_op("__xor__", o)

    def __rxor__(self, o):
        return self._int_op("__rxor__", o)

    def __lshift__(self, o):
        return self._int_op("__lshift__", o)

    def __rlshift__(self, o):
        return self._int_op("__rlshift__", o)

    def __rshift__(self, o):
        return self._int_op("__rshift__", o)

    def __rrshift__(self, o):
        return self._int_op("__rrshift__", o)

    def __invert__(self):
        return self._int_op("__invert__")

    def __abs__(self):
        return self._int_op("__abs__")

    def __round__(self, ndigits=None):
        return self._int_op("__round__") if ndigits is None else \
            self._int_op("__round__", ndigits)

    def __trunc__(self):
        return self._int_op("__trunc__")

    def __floor__(self):
        return self._int_op("__floor__")

    def __ceil__(self):
        return self._int_op("__ceil__")

    def __divmod__(self, o):
        return self._int_op("__divmod__", o)

    def __rdivmod__(self, o):
        return self._int_op("__rdivmod__", o)

    def __repr__(self):
        return _text(self.expr)


class SymShape(tuple):
    """``x.shape`` / ``x.size()`` of a proxy with symbolic sizes: a tuple of ints and
    SymInts (torch.Size holds ints only). ``numel()`` as torch.Size has it."""

    def numel(self):
        """The product of the sizes (an int or a SymInt), as torch.Size.numel."""
        out = 1
        for s in self:
            out = out * s
        return out

    def __getitem__(self, i):
        r = tuple.__getitem__(self, i)
        return SymShape(r) if isinstance(i, slice) else r

    def __add__(self, o):
        return SymShape(tuple(self) + tuple(o))

    def __radd__(self, o):
        return SymShape(tuple(o) + tuple(self))


def _is_int(x) -> bool:
    return type(x) is SymInt or isinstance(x, int)


def has_symint(x) -> bool:
    """Whether ``x`` (a value, or tuples/lists/dicts of values) holds a SymInt."""
    if type(x) is SymInt:
        return True
    if isinstance(x, (tuple, list)):
        return any(has_symint(v) for v in x)
    if isinstance(x, dict):
        return any(has_symint(v) for v in x.values())
    return False


def same_shape(a, b) -> bool:
    """Whether two shapes are the same for every size (no guard): ints equal, symbolic
    sizes of equal expressions. For a shortcut (skip a no-op reshape); a False costs an op,
    never a wrong result."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if type(x) is SymInt or type(y) is SymInt:
            if sympy.expand(_expr(x) - _expr(y)) != 0:
                return False
        elif x != y:
            return False
    return True


def stretches_to(n, m) -> bool:
    """Whether a dim of size ``n`` broadcasts to size ``m`` (``n`` is 1 or equal to ``m``):
    sizes of the same expression without a comparison (no guard: a data-dependent size may
    be 1, and ``n == 1`` would record a guard that it is not), else as ``n in (1, m)``."""
    if type(n) is SymInt and type(m) is SymInt and n.expr == m.expr:
        return True
    return n in (1, m)


def is_symbolic(shape) -> bool:
    """Whether a shape (a sequence of ints and SymInts) has a symbolic dimension."""
    return any(type(s) is SymInt for s in shape)


def hints(shape) -> tuple[int, ...]:
    """The concrete shape at the traced call. Raises DynamicShapeFallback for a negative
    size: an IR ``?`` whose expression is unknown where it is read."""
    out = tuple(s.hint if type(s) is SymInt else int(s) for s in shape)
    if any(s < 0 for s in out):
        raise DynamicShapeFallback("a dynamic dimension was read back from the IR without "
                                   "its expression (a pass or executor rebuilt a proxy)")
    return out


def dim_text(s) -> str:
    """The attribute text of one dimension: its expression, or the integer."""
    return _text(s.expr) if type(s) is SymInt else str(int(s))


@functools.lru_cache(maxsize=4096)
def _text(expr: sympy.Expr) -> str:
    """``str(expr)``, cached: sympy's printer costs ~10 us a call, and a trace prints the
    same few size expressions into the type of every op (4339 prints in a 6-layer BERT)."""
    return str(expr)


@functools.lru_cache(maxsize=4096)
def parse_dim(text: str) -> sympy.Expr:
    """A dimension expression from its attribute text. Cached by the text (sympy's parser
    takes ~0.7 ms a call, and the lowering of a symbolic program reads the same few
    expressions at every op: 744 parses, 0.5 s of a 6-layer BERT's first call); the
    expressions are immutable, and ``s<k>`` always names the same symbol."""
    return sympy.sympify(text, locals={n: symbol(int(n[1:])) for n in _names(text)})


def _names(text: str) -> list[str]:
    import re

    return re.findall(r"\bs\d+\b", text)
