"""Differential fuzzer (issue 13): random small programs built from ops and the idioms of
the catalogue (grad-mode regions, detach, ``.data``, in-place updates of intermediates and
of a buffer input, a custom autograd.Function, a branch on ``requires_grad``, a global
config object and a global flag changed between calls), each run eagerly and through
``thunder_mlir.jit`` for two calls and compared by ``idiom_harness.check_idiom``: values,
``requires_grad``, aliasing, the buffer's in-place update, gradients of both inputs.

``THUNDER_FUZZ_EXAMPLES`` programs per run (default 2000), generated deterministically
(``derandomize``), so CI sees what a developer saw. A difference found becomes a case of
``REGRESSIONS`` below.
"""

from __future__ import annotations

import os
import time

import pytest
from hypothesis import HealthCheck, Phase, given, settings

import fuzz_programs as fp
from fuzz_programs import S
from idiom_harness import Step, check_idiom

EXAMPLES = int(os.environ.get("THUNDER_FUZZ_EXAMPLES", "2000"))


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


def test_random_programs_match_eager():
    count = [0]

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              phases=[Phase.generate, Phase.shrink],
              suppress_health_check=list(HealthCheck))
    @given(fp.programs())
    def prop(prog):
        count[0] += 1
        check_program(*prog)

    t0 = time.perf_counter()
    prop()
    print(f"\nfuzzer: {count[0]} programs matched eager in {time.perf_counter() - t0:.0f} s")
    assert count[0] >= EXAMPLES
