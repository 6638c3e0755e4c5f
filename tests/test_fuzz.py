"""Differential fuzzer (issue 13): random small programs built from ops and the idioms of
the catalogue (grad-mode regions, detach, ``.data``, in-place updates of intermediates and
of a buffer input, a custom autograd.Function, a branch on ``requires_grad``, a global
config object and a global flag changed between calls), each run eagerly and through
``thunder_mlir.jit`` for two calls and compared by ``idiom_harness.check_idiom``: values,
``requires_grad``, aliasing, the buffer's in-place update, gradients of both inputs.

Since issue 25 the programs also write (``fuzz_programs.write``): ``__setitem__`` with
structurally generated indices, the in-place variants of PyTorch's ``op_db``
(``fuzz_opdb.py``), into intermediates, views of them, views of the inputs and after ops
only the torch fallback runs; and data-dependent statements whose values change between
the two calls.

``THUNDER_FUZZ_COLLECT=1`` runs every program instead of stopping at the first difference,
prints each difference (program, "wrong value" or "error") and a count, then fails if there
was any: the way to survey a change, or to time the full run when programs fail.

``THUNDER_FUZZ_EXAMPLES`` programs per run (default 2000), generated deterministically
(``derandomize``), so CI sees what a developer saw. A difference found becomes a case of
``REGRESSIONS`` below.
"""

from __future__ import annotations

import os
import time

import pytest
from hypothesis import HealthCheck, Phase, given, settings

import fuzz_opdb
import fuzz_programs as fp
from fuzz_programs import S
from idiom_harness import Step, check_idiom

EXAMPLES = int(os.environ.get("THUNDER_FUZZ_EXAMPLES", "2000"))
COLLECT = os.environ.get("THUNDER_FUZZ_COLLECT") == "1"


def check_program(stmts, outs) -> None:
    def program(a, b, buf):
        return fp.interpret(stmts, outs, a, b, buf)
    try:
        check_idiom(program, fp.make_inputs, [Step(), Step(before=fp.change_globals)],
                    match_error=False, jit_options={"recompile_limit": 100})
    finally:
        fp.reset_globals()


# Programs the fuzzer found to differ from eager, kept after the fix.
REGRESSIONS: list = [
    # contiguous() of a view: eager copies (no alias), the trace had returned the input's view
    ([S("unary", "t_t", (0, 0))], (3,)),
    # clone() folds to its input in the IR: XLA returned the input's own buffer
    ([S("unary", "clone", (0, 0))], (3,)),
    # an in-place update of a base with a detach() view was refused; its views now follow
    ([S("detach", "abs", (2, 0)), S("buffer", "abs", (0, 0))], (3, 4)),
    # a buffer saved for backward, then updated in place: eager's backward raises
    ([S("buffer", "abs", (0, 0)), S("buffer", "abs", (0, 0))], (3,)),
    # a view made under no_grad() of an input that requires grad: requires grad, but no
    # gradient flows through it
    ([S("no_grad", "flat", (0, 0))], (3,)),
    # contiguous() of a non-contiguous view of the buffer is a copy: the buffer's later
    # in-place update must not reach it
    ([S("unary", "t_t", (8, 0)), S("unary", "abs", (0, 0)), S("buffer", "abs", (0, 0))], (3,)),
]


@pytest.mark.parametrize("stmts,outs", REGRESSIONS, ids=range(len(REGRESSIONS)))
def test_regression(stmts, outs):
    check_program(stmts, outs)


def classify(e: BaseException) -> str:
    """"error" where the jitted program raised and eager did not (or another error than
    eager's); "wrong value" for a silent difference."""
    text = str(e)
    if isinstance(e, AssertionError) and ("jit raised" in text or "jit's raised" in text):
        return "error"
    return "wrong value" if isinstance(e, AssertionError) else "error"


def test_random_programs_match_eager():
    count = [0]
    found = []
    times = [0.0, 0.0]  # seconds in programs that matched, that differed
    t0 = time.perf_counter()
    print(f"\nfuzzer: {fuzz_opdb.describe()} (table built in {time.perf_counter() - t0:.0f} s)")

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              phases=[Phase.generate] if COLLECT else [Phase.generate, Phase.shrink],
              suppress_health_check=list(HealthCheck))
    @given(fp.programs())
    def prop(prog):
        count[0] += 1
        if not COLLECT:
            check_program(*prog)
            return
        t = time.perf_counter()
        try:
            check_program(*prog)
            times[0] += time.perf_counter() - t
        except Exception as e:  # noqa: BLE001 - reported below
            times[1] += time.perf_counter() - t
            first = str(e).strip().splitlines()
            found.append((count[0], classify(e), prog, " / ".join(first[:2])[:400]))
            print(f"program {count[0]}: {classify(e)}: {prog!r}\n    {found[-1][3]}", flush=True)

    t0 = time.perf_counter()
    prop()
    elapsed = time.perf_counter() - t0
    if found:
        kinds = {k: sum(1 for f in found if f[1] == k) for k in ("wrong value", "error")}
        print(f"\nfuzzer: {len(found)} of {count[0]} programs differ from eager ({kinds}) in "
              f"{elapsed:.0f} s; first wrong value at program "
              f"{next((f[0] for f in found if f[1] == 'wrong value'), None)}; "
              f"{times[0] / max(1, count[0] - len(found)):.2f} s per matching program, "
              f"{times[1] / len(found):.2f} s per differing one")
    assert not found, f"{len(found)} programs differ from eager"
    print(f"\nfuzzer: {count[0]} programs matched eager in {elapsed:.0f} s")
    assert count[0] >= EXAMPLES
