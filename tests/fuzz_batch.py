"""Many fuzzer programs checked through one jitted function (tests/test_fuzz.py).

A fuzzer program is small: most of the time ``thunder_mlir.jit`` spends on it is what every
compilation pays whatever its size (an XLA compile of its regions, the MLIR passes, the
plan). ``check_batch`` therefore fuses independently drawn programs into one Python
function that takes every program's own inputs and returns the tuple of every program's
outputs, jits that function once, and compares each program with eager PyTorch separately,
as ``idiom_harness.check_idiom`` compares one program:

* eager runs each program alone, step by step (``steps``: the globals changed between the
  two calls), on inputs drawn under the step's seed, exactly as ``check_idiom`` draws them;
* the jitted batch is called once per step; every program's inputs are drawn under the
  same seed as alone (each program sees the values it sees alone, and its data-dependent
  statements see new values at every call);
* per program: outputs (values, dtypes, shapes, ``requires_grad``), aliasing (an output of
  one program sharing storage with any input of the batch other than eager's is a
  difference), every input's value after the call (the buffer's write-back), and the
  gradients: one ``backward`` over every program's outputs with each program's own
  cotangents (drawn as ``check_idiom`` draws them), the programs' inputs being disjoint, so
  each input's ``.grad`` is its own program's gradient.

A program for which eager raises (in the call or in its backward: an in-place write of a
leaf that requires grad, a buffer saved for backward then written) is checked alone by
``check_one`` (``check_idiom``'s error comparison), as is every program of a batch whose
jitted call or backward raised (one program's refusal does not hide the others), and every
program that differed in its batch: the difference reported is the one of the program run
alone, or, where alone it matches eager, the batch's, marked as such.

Batches are formed so that each program keeps the compilations it has alone (``plan``):
programs that read no global and have no data-dependent statement share batches whose
second call hits the cache; programs that read the changed globals share batches traced
again at the second call (as each of them is alone). A program with a data-dependent
statement is checked alone: each value the trace needs compiles and runs the program
prefix before it and traces again (docs/architecture.md, "Values of tensors in Python"),
so in a batch every such value would re-trace and re-compile the whole batch (measured:
several times the cost of checking those programs alone), and its second call, whose
values differ, takes the failed-value-guard path (``value_specialization.guard_failed``)
only where no global changed. Gradients are always needed, so a data-dependent size is
specialized on its value (never an unbacked size symbol), in a batch as alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

import fuzz_programs as fp
import thunder_mlir
from conftest import manual_seed
from idiom_harness import TOL, Step, _alias_map, _assert_close, _compare_outputs, _tensors

BATCH = 25  # programs per jitted function


@dataclass
class Program:
    """A drawn program: ``number`` (1-based, in draw order), its statements and outputs."""

    number: int
    stmts: list
    outs: tuple

    @property
    def reads_globals(self) -> bool:
        return any(s.kind in ("config", "flag") for s in self.stmts)

    @property
    def data_dependent(self) -> bool:
        return any(s.kind == "datadep" for s in self.stmts)

    def run(self, a, b, buf):
        return fp.interpret(self.stmts, self.outs, a, b, buf)


@dataclass
class Difference:
    """A program that differs from eager: ``kind`` "wrong value" | "error"; ``message``:
    the first lines of the assertion or the jit's error."""

    program: Program
    kind: str
    message: str
    error: BaseException = field(repr=False, default=None)


@dataclass
class _Eager:
    """Eager's observations of one program at one step."""

    out: tuple
    ins: list
    alias: list
    diff: list
    grads: list


def _inputs(k: int):
    manual_seed(1000 + k)  # check_idiom's seed for step k
    return list(fp.make_inputs())


def _cotangents(k: int, outs, diff):
    g = torch.Generator().manual_seed(k)  # check_idiom's cotangents for step k
    return [torch.randn(outs[i].shape, generator=g, dtype=outs[i].dtype) for i in diff]


def eager_reference(program: Program, steps: Sequence[Step]) -> list[_Eager] | None:
    """Eager's observations of ``program`` at each step, or None where eager raises (in a
    call or its backward): such a program is checked alone."""
    refs = []
    try:
        for k, step in enumerate(steps):
            if step.before is not None:
                step.before(None)
            ins = _inputs(k)
            with torch.set_grad_enabled(step.grad_mode):
                out = program.run(*ins)
            outs = _tensors(out)
            diff = [i for i, o in enumerate(outs) if o.requires_grad]
            if step.backward and diff:
                torch.autograd.backward([outs[i] for i in diff], _cotangents(k, outs, diff))
            refs.append(_Eager(out, ins, _alias_map(outs, ins), diff,
                               [t.grad for t in ins]))
    except Exception:  # noqa: BLE001 - checked alone, where eager's error is compared
        return None
    finally:
        fp.reset_globals()
    return refs


def _batch_function(programs: Sequence[Program]) -> Callable:
    def batch(*ins):
        return tuple(p.run(*ins[3 * i:3 * i + 3]) for i, p in enumerate(programs))
    return batch


def _run_batch(programs: Sequence[Program], refs: Sequence[list[_Eager]],
               steps: Sequence[Step]) -> tuple[dict[int, AssertionError], BaseException | None]:
    """The jitted batch against eager's ``refs``: (program index -> its first difference,
    the batch's error if the jitted call or its backward raised)."""
    jitted = thunder_mlir.jit(_batch_function(programs), recompile_limit=100)
    failed: dict[int, AssertionError] = {}
    try:
        for k, step in enumerate(steps):
            if step.before is not None:
                step.before(None)
            ins = [t for _ in programs for t in _inputs(k)]
            try:
                with torch.set_grad_enabled(step.grad_mode):
                    out = jitted(*ins)
            except Exception as e:  # noqa: BLE001 - each program is then checked alone
                return failed, e
            backward = []  # (outputs, cotangents) of the programs that matched so far
            for i, ref in enumerate(r[k] for r in refs):
                if i in failed:
                    continue
                mine = ins[3 * i:3 * i + 3]
                try:
                    _compare_outputs(out[i], ref.out, TOL)
                    outs = _tensors(out[i])
                    alias = [tuple(3 * i + j for j in m) for m in ref.alias]
                    assert _alias_map(outs, ins) == alias, (
                        f"step {k}: outputs alias inputs differently: jit "
                        f"{_alias_map(outs, ins)}, eager {alias} (inputs of the batch)")
                    for j, (a, e) in enumerate(zip(mine, ref.ins)):
                        _assert_close(a, e, f"step {k}: input tensor {j} after the call", TOL)
                    diff = [j for j, o in enumerate(outs) if o.requires_grad]
                    assert diff == ref.diff, (
                        f"step {k}: outputs requiring grad: jit {diff}, eager {ref.diff}")
                except AssertionError as e:
                    failed[i] = e
                    continue
                if step.backward and diff:
                    backward.append((i, [outs[j] for j in diff], _cotangents(k, outs, diff)))
            if backward:
                try:
                    torch.autograd.backward([t for _, ts, _ in backward for t in ts],
                                            [c for _, _, cs in backward for c in cs])
                except Exception as e:  # noqa: BLE001 - each program is then checked alone
                    return failed, e
            for i, _, _ in backward:
                ref = refs[i][k]
                for j, a in enumerate(ins[3 * i:3 * i + 3]):
                    what = f"step {k}: input tensor {j}"
                    try:
                        if ref.grads[j] is None:
                            assert a.grad is None, f"{what}: eager has no .grad, jit has one"
                        else:
                            assert a.grad is not None, f"{what}: jit has no .grad, eager has one"
                            _assert_close(a.grad, ref.grads[j], f"{what}.grad", TOL)
                    except AssertionError as err:
                        failed.setdefault(i, err)
    finally:
        fp.reset_globals()
    return failed, None


def plan(programs: Sequence[Program], size: int = BATCH) -> list[list[Program]]:
    """The batches (see the module docstring): programs that read no global, programs
    that read the globals, and each program with a data-dependent statement alone."""
    static = [p for p in programs if not p.reads_globals and not p.data_dependent]
    glob = [p for p in programs if p.reads_globals and not p.data_dependent]
    batches = [group[i:i + size] for group in (static, glob)
               for i in range(0, len(group), size)]
    return batches + [[p] for p in programs if p.data_dependent]


def classify(e: BaseException) -> str:
    """"error" where the jitted program raised and eager did not (or another error than
    eager's); "wrong value" for a silent difference."""
    text = str(e)
    if isinstance(e, AssertionError) and ("jit raised" in text or "jit's raised" in text):
        return "error"
    return "wrong value" if isinstance(e, AssertionError) else "error"


def _summary(e: BaseException) -> str:
    first = str(e).strip().splitlines()
    return " / ".join(first[:2])[:400]


def check_batch(programs: Sequence[Program], steps: Sequence[Step],
                check_one: Callable[[Program], None]) -> list[Difference]:
    """Check ``programs`` (one batch, see ``plan``) against eager; returns their
    differences (none: every program matched). ``check_one(program)`` checks a program
    alone (raising its difference)."""
    if len(programs) == 1:  # (a data-dependent program: checked alone)
        try:
            check_one(programs[0])
        except Exception as e:  # noqa: BLE001 - reported
            return [Difference(programs[0], classify(e), _summary(e), e)]
        return []
    refs = [eager_reference(p, steps) for p in programs]
    alone = [p for p, r in zip(programs, refs) if r is None]
    together = [(p, r) for p, r in zip(programs, refs) if r is not None]
    failed, error = {}, None
    if together:
        failed, error = _run_batch([p for p, _ in together], [r for _, r in together], steps)
    if error is not None:  # the batch raised: every program not yet differing, alone
        alone += [p for i, (p, _) in enumerate(together) if i not in failed]
    differences = []
    for p in alone:
        try:
            check_one(p)
        except Exception as e:  # noqa: BLE001 - reported
            differences.append(Difference(p, classify(e), _summary(e), e))
    for i in sorted(failed):
        p = together[i][0]
        try:
            check_one(p)
        except Exception as e:  # noqa: BLE001 - reported as alone
            differences.append(Difference(p, classify(e), _summary(e), e))
            continue
        differences.append(Difference(  # alone it matches eager; in its batch it did not
            p, classify(failed[i]), f"in a batch of programs {[q.number for q, _ in together]}"
            f" (alone it matches eager): {_summary(failed[i])}", failed[i]))
    batched = [p for p, _ in together]
    if error is not None and not any(d.program in batched for d in differences):
        numbers = [p.number for p, _ in together]
        differences.append(Difference(
            together[0][0], "error",
            f"the batch of programs {numbers} raised, each alone matches eager: "
            f"{type(error).__name__}: {_summary(error)}", error))
    return differences
