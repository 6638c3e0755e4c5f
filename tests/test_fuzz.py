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

``THUNDER_FUZZ_EXAMPLES`` programs per run (default 2,000, issue 25),
drawn deterministically (``derandomize``), so CI sees what a developer saw, and numbered
in draw order. They are checked in batches (``fuzz_batch.py``): about 25 programs fused
into one jitted function, each program compared with eager on its own; a program eager
refuses, a program with a data-dependent statement, every program of a batch that raised
and every program that differed in its batch is checked alone (``check_program``), and a
difference is reported as the program alone gives it (or, where alone it matches eager,
as its batch gave it). A drawn program listed in ``OPEN`` or ``ROUNDING`` is printed and
not counted.
A difference found becomes a case of ``REGRESSIONS`` below.

``THUNDER_FUZZ_COLLECT=1`` checks every program instead of stopping at the first
difference, prints each difference (program number, "wrong value" or "error", the program,
the first lines of the difference) and a count, then fails if there was any: the way to
survey a change, or to time the full run when programs fail.

``THUNDER_FUZZ_SHRINK=1`` (without COLLECT) checks the programs one at a time inside
hypothesis, which shrinks a differing program to a shorter one (off by default: CI
reports the program as drawn, and one at a time takes about 6 times as long).
"""

from __future__ import annotations

import os
import time

import pytest
from hypothesis import HealthCheck, Phase, given, settings

import fuzz_opdb
import fuzz_programs as fp
from fuzz_programs import S
from fuzz_batch import Program, check_batch, plan
from idiom_harness import Step, check_idiom

# 120 in CI since 2026-12-02: 2,000 took 996 s of a 2,400 s local make test (CI: 2,155 s),
# past CI's 30 minutes with make compat. THUNDER_FUZZ_EXAMPLES=2000 runs issue 25's
# count (programs 877-881 are REGRESSIONS below; the 2,000-program survey after the
# session 16 speed-ups: 725 s on one loaded core). The arithmetic (process CPU time, no
# persistent compile cache, measured at 250 programs before those speed-ups): 0.24 CPU-s
# a program (batches that read no global: 0.21; those that read the globals, traced at
# each call: 0.23; data-dependent ones, each alone: 0.51), XLA compiles 38 % of it; plus
# 12 CPU-s for fuzz_opdb's table and 1.7 for drawing. Batches of 10, 25 or 50 programs
# cost the same. THUNDER_FUZZ_EXAMPLES=N runs another number of programs.
# 60 since stop 51 (CI at 34 minutes; 120 took 54 s of its make test)
EXAMPLES = int(os.environ.get("THUNDER_FUZZ_EXAMPLES", "60"))
COLLECT = os.environ.get("THUNDER_FUZZ_COLLECT") == "1"
SHRINK = os.environ.get("THUNDER_FUZZ_SHRINK") == "1"


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
    # Session 18, programs 927-928: div_(rounding_mode='trunc') by a zero element: eager's
    # gradient is 0 (derivatives.yaml), the jitted one was nan (the division's VJP of the
    # rounding's zero cotangent, 0 / 0)
    ([S('requires_grad_branch', 'floor', (6, 5)),
      S('inplace_op', 'floor', (9, 7), ('after_fallback', 'base', 'view_of_view',
                                        'div.trunc_rounding#0')),
      S('custom', 'floor', (11, 2))], (7, 4)),
    ([S('requires_grad_branch', 'floor', (6, 5)),
      S('inplace_op', 'floor', (9, 7), ('after_fallback', 'base', 'view_of_view',
                                        'div.trunc_rounding#0')),
      S('custom', 'floor', (11, 2))], (3, 4)),
    # Session 18, programs 999-1000: `buf * y` saves the buffer, then `buf[torch.tensor(
    # True), idx] = v` writes it: eager's backward raises "modified by an inplace
    # operation", the jitted one returned gradients (the write's meta replay cannot take a
    # 0-d bool index: the buffer's twin was dropped without its version moving)
    ([S('flag', 'rowsum', (2, 10)), S('unary', 'rowsum', (5, 11)), S('unary', 'square', (7, 1)),
      S('setitem', 'flat', (8, 4), ('buffer', 'base', 'id', (('bool0', True),
                                                            ('int_tensor', (1,), (2,))),
                                    'zero_d', '=', (1, 4))),
      S('native_op', 't_t', (3, 12), ('intermediate', 'base', 'ne#1'))], (4, 11, 6)),
    ([S('flag', 'rowsum', (2, 10)), S('unary', 'rowsum', (5, 11)), S('unary', 'square', (7, 1)),
      S('setitem', 'flat', (8, 4), ('buffer', 'base', 'id', (('bool0', True),
                                                            ('int_tensor', (1,), (2,))),
                                    'zero_d', '=', (1, 4))),
      S('native_op', 't_t', (3, 12), ('buffer', 'base', 'ne#1'))], (4, 11, 6)),
    # Session 18, the two new statements, shortest programs found with the fix reverted:
    # a copy of the buffer, then the buffer written (program 1205: the output was the
    # written value); a checkpoint reading the buffer written after it (program 1270: the
    # gradient of the value at the checkpoint)
    ([S('copy_then_write', 'sigmoid', (11, 0))], (11,)),
    ([S('checkpoint', 'abs', (1, 11))], (11,)),
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
    # Issue 25: the fuzzer's writes and data-dependent statements, first run (2,000 programs,
    # THUNDER_FUZZ_COLLECT=1, before functionalization): the shortest program of each kind
    # of difference (by error text, and for wrong values by the writes involved), kept
    # after the fix; op_db entries are named "<OpInfo name>#<sample index>".
    # issue 25, fuzzer program 175: wrong value today: output leaf 1: Tensor-likes are not close! /
    ([S('binary', 'add', (6, 8)), S('setitem', 'tanh', (4, 8), ('buffer', 'base', 'id', (('none',), ('none',), ('int', -2)), 'last_dim', '=', (1, 1, 4))), S('requires_grad_branch', 't_t', (11, 8)), S('no_grad', 'tanh', (6, 2))], (0, 4)),
    # issue 25, fuzzer program 752: wrong value today: step 0: input tensor 0.grad: Tensor-likes are not close! /
    ([S('requires_grad_branch', 'rowsum', (0, 5)), S('native_op', 'sin', (7, 0), ('buffer', 'view_made_before', 'addbmm#0')), S('datadep', 'neg', (9, 4), ('mask_assign',)), S('requires_grad_branch', 'neg', (1, 4)), S('binary', 'sub', (9, 2))], (7, 0, 5)),
    # issue 25, fuzzer program 953: wrong value today: output leaf 1: requires_grad False != eager's True
    ([S('no_grad', 't_t', (1, 9)), S('reverse', 't_t', (8, 1)), S('no_grad', 'neg', (2, 2)), S('native_op', 'center', (11, 3), ('intermediate', 'view_made_before', 'pow#1'))], (12, 6)),
    # issue 25, fuzzer program 1017: wrong value today: step 0: input tensor 1.grad: Tensor-likes are not close! /
    ([S('datadep', 'sin', (1, 11), ('mask_assign',))], (10, 3)),
    # issue 25, fuzzer program 1098: wrong value today: output leaf 1: Tensor-likes are not close! /
    ([S('setitem', 'exp', (0, 9), ('intermediate', 'base', 'step', (('data_mask',),), 'scalar', '=', ()))], (5, 3)),
    # issue 25, fuzzer program 1277: wrong value today: step 0: input tensor 2 after the call: Tensor-likes are not close! /
    ([S('enable_grad', 'flat', (3, 12)), S('requires_grad_branch', 'softmax', (11, 2)), S('setitem', 'sigmoid', (8, 10), ('buffer', 'view_made_before', 't', (('int', 0),), 'last_dim', '=', (3,))), S('unary', 'clone', (0, 9)), S('datadep', 'rowsum', (1, 11), ('mask_assign',)), S('config', 'sin', (11, 12))], (3, 5)),
    # issue 25, fuzzer program 1497: wrong value today: step 0: input tensor 2 after the call: Tensor-likes are not close! /
    ([S('binary', 'add', (10, 6)), S('config', 'flat', (9, 6)), S('setitem', 'floor', (7, 0), ('buffer', 'view_made_before', 'flat', (('ellipsis',), ('list', (0,))), 'scalar', '=', (1,))), S('detach', 'center', (11, 1)), S('no_grad', 'exp', (0, 5)), S('flag', 'softmax', (5, 2))], (6, 5)),
    # issue 25, fuzzer program 1502: wrong value today: output leaf 1: Tensor-likes are not close! /
    ([S('setitem', 'flat', (7, 10), ('intermediate', 'view_made_before', 'col_neg', (('data_mask',),), 'zero_d', '=', ())), S('native_op', 'relu', (8, 12), ('intermediate', 'base', 'logical_or#1'))], (5, 3)),
    # issue 25, fuzzer program 1703: wrong value today: step 0: input tensor 2 after the call: Tensor-likes are not close! /
    ([S('requires_grad_branch', 'floor', (8, 2)), S('requires_grad_branch', 'rowsum', (7, 9)), S('inplace_op', 'exp', (5, 6), ('buffer', 'view_made_before', 'step', 'nn.functional.celu#1')), S('inplace', 'tanh', (10, 1)), S('flag', 'floor', (2, 3)), S('no_grad', 'sin', (11, 4))], (12, 5)),
    # issue 25, fuzzer program 1827: wrong value today: output leaf 0: Tensor-likes are not close! /
    ([S('datadep', 'tanh', (10, 5), ('mask_assign',)), S('no_grad', 'flat', (11, 6)), S('no_grad', 'flat', (8, 5)), S('native_op', 't_t', (4, 0), ('intermediate', 'view_made_before', 'add#1'))], (6,)),
    # issue 25, fuzzer program 1832: wrong value today: output leaf 0: Tensor-likes are not close! /
    ([S('setitem', 'abs', (0, 12), ('after_fallback', 'base', 'col_neg', (('int', 0),), 'scalar', '=', ())), S('enable_grad', 'abs', (2, 1)), S('data', 'abs', (1, 1))], (3,)),
    # fuzzer programs 1485-1489: pow_ of the buffer (negative bases) gives NaN where eager
    # gives NaN; the harness compared NaN with NaN as a difference (now equal_nan)
    ([S('native_op', 'sin', (12, 0), ('buffer', 'base', 'pow#1')), S('flag', 'clone', (6, 2))],
     (8,)),
    # issue 25, fuzzer program 9: error today: step 0: eager raised RuntimeError, jit raised DataDependentControlFlowError: return x.exp() if 
    ([S('data', 'floor', (8, 5)), S('data', 'floor', (10, 1)), S('datadep', 't_t', (1, 7), ('any_branch',)), S('inplace_op', 'exp', (10, 8), ('leaf', 'base', 'flat', 'round#0'))], (12,)),
    # issue 25, fuzzer program 31: error today: step 0: eager succeeded, jit raised RuntimeError: torch.masked_select: its outputs [((9,), torc
    ([S('datadep', 'floor', (2, 11), ('masked_select',)), S('datadep', 'center', (4, 2), ('masked_select',)), S('binary', 'add', (4, 5))], (5, 9)),
    # issue 25, fuzzer program 33: error today: step 0: eager succeeded, jit raised UnsupportedError: return entry.fn(target, *args, **kwargs) 
    ([S('native_op', 'clone', (9, 7), ('after_fallback', 'base', 'index_reduce.prod#0')), S('buffer', 'relu', (9, 7))], (6, 3)),
    # issue 25, fuzzer program 123: error today: step 0: eager succeeded, jit raised UnsupportedError: return entry.fn(target, *args, **kwargs) 
    ([S('native_op', 'flat', (5, 7), ('buffer', 'view_made_before', 'index_reduce.mean#1')), S('custom', 'clone', (1, 8)), S('custom', 'clone', (2, 9)), S('data', 'flat', (4, 2))], (1, 3)),
    # issue 25, fuzzer program 131: error today: step 0: eager succeeded, jit raised DataDependentControlFlowError: return x.exp() if (x > 1.5).
    ([S('datadep', 'floor', (4, 1), ('any_branch',)), S('native_op', 'floor', (12, 9), ('buffer', 'base', 'addmm#0'))], (5, 3)),
    # issue 25, fuzzer program 138: error today: step 0: eager succeeded, jit raised UnsupportedError: return entry.fn(target, *args, **kwargs) 
    ([S('buffer', 'exp', (5, 7)), S('native_op', 'tanh', (10, 3), ('buffer', 'base', 'ge#1')), S('inplace', 'softmax', (11, 6)), S('native_op', 'relu', (2, 10), ('buffer', 'view_made_before', 'div.trunc_rounding#1'))], (4,)),
    # issue 25, fuzzer program 140: error today: step 0: eager succeeded, jit raised UnsupportedError: return entry.fn(target, *args, **kwargs) 
    ([S('buffer', 'exp', (5, 7)), S('native_op', 'tanh', (10, 3), ('buffer', 'view_made_before', 'div.trunc_rounding#1')), S('inplace', 'softmax', (11, 6)), S('native_op', 'relu', (2, 10), ('buffer', 'view_made_before', 'div.trunc_rounding#1'))], (4,)),
    # issue 25, fuzzer program 193: error today: step 0: eager succeeded, jit raised UnsupportedError: return entry.fn(target, *args, **kwargs) 
    ([S('reverse', 'abs', (3, 5)), S('inplace_op', 'sigmoid', (4, 5), ('intermediate', 'view_made_before', 'row', 'nn.functional.dropout3d#0')), S('reverse', 'relu', (1, 0))], (5, 5, 4)),
    # issue 25, fuzzer program 196: error today: step 0: eager succeeded, jit raised UnsupportedError: return entry.fn(target, *args, **kwargs) 
    ([S('detach', 'center', (10, 8)), S('inplace_op', 'flat', (6, 11), ('after_fallback', 'base', 'unsqueeze', 'cumprod#1'))], (3, 4)),
    # issue 25, fuzzer program 202: error today: step 0: eager succeeded, jit raised UnsupportedError: return entry.fn(target, *args, **kwargs) 
    ([S('native_op', 'floor', (10, 1), ('buffer', 'base', 'mul#1'))], (4, 3)),
    # issue 25, fuzzer program 319: error today: step 0: eager succeeded, jit raised UnsupportedError: return entry.fn(target, *args, **kwargs) 
    ([S('inplace_op', 'flat', (5, 6), ('intermediate', 'view_made_before', 'view_of_view', 'lerp#0')), S('data', 'sin', (7, 0))], (2, 3)),
    # issue 25, fuzzer program 384: error today: step 0: eager succeeded, jit raised UnsupportedError: return entry.fn(target, *args, **kwargs) 
    ([S('inplace_op', 'tanh', (8, 12), ('buffer', 'base', 'unfold', 'mvlgamma.mvlgamma_p_1#1'))], (5, 3)),
    # issue 25, fuzzer program 524: error today: step 0: eager succeeded, jit raised DataDependentControlFlowError: return x * 2 if x.sum() > 0 
    ([S('datadep', 'neg', (7, 5), ('branch',))], (5, 3)),
    # issue 25, fuzzer program 556: error today: step 0: eager succeeded, jit raised UnsupportedError: return _adapt(y, mask.shape)[mask] # "mas
    ([S('no_grad', 'softmax', (3, 12)), S('setitem', 'sin', (2, 1), ('intermediate', 'view_made_before', 'view_of_view', (('data_mask',),), 'masked_source', '+=', ())), S('inplace', 'center', (1, 8)), S('inplace', 'sin', (7, 12))], (11, 7)),
    # issue 25, fuzzer program 587: error today: step 0: eager succeeded, jit raised UnsupportedError: return entry.fn(target, *args, **kwargs) 
    ([S('inplace_op', 'center', (1, 11), ('intermediate', 'base', 'unfold', 'exp#0')), S('reverse', 'clone', (5, 7)), S('binary', 'maximum', (2, 1)), S('unary', 'square', (10, 10)), S('detach', 'square', (2, 4)), S('native_op', 'rowsum', (1, 0), ('leaf', 'base', 'addbmm#2'))], (12, 2)),
    # issue 25, fuzzer program 601: error today: step 0: eager succeeded, jit raised UnsupportedError: return entry.fn(target, *args, **kwargs) 
    ([S('inplace_op', 'neg', (6, 1), ('intermediate', 'view_made_before', 'permute', 'transpose#2'))], (6, 3)),
    # issue 25, fuzzer program 606: error today: step 0: eager succeeded, jit raised UnsupportedError: return entry.fn(target, *args, **kwargs) 
    ([S('inplace_op', 'exp', (7, 7), ('buffer', 'base', 'cols', 'digamma#0'))], (7,)),
    # issue 25, fuzzer program 608: error today: step 0: eager succeeded, jit raised UnsupportedError: return entry.fn(target, *args, **kwargs) 
    ([S('inplace_op', 'sigmoid', (4, 7), ('after_fallback', 'view_made_before', 'unfold', 'neg#0'))], (4, 3)),
    # issue 25, fuzzer program 669: error today: step 0: eager succeeded, jit raised UnsupportedError: return entry.fn(target, *args, **kwargs) 
    ([S('inplace_op', 'neg', (3, 6), ('intermediate', 'base', 'narrow', 'triu#1')), S('enable_grad', 'neg', (2, 2)), S('native_op', 'abs', (1, 6), ('intermediate', 'base', 'add#1')), S('detach', 'square', (6, 10))], (0, 3)),
    # issue 25, fuzzer program 696: error today: step 0: eager succeeded, jit raised UnsupportedError: return entry.fn(target, *args, **kwargs) 
    ([S('flag', 'neg', (3, 1)), S('inplace_op', 'rowsum', (10, 0), ('intermediate', 'base', 'flat', 'nextafter#0')), S('detach', 'tanh', (3, 1))], (3, 4)),
    # issue 25, fuzzer program 761: error today: step 0: eager succeeded, jit raised UnsupportedError: return entry.fn(target, *args, **kwargs) 
    ([S('buffer', 'clone', (2, 11)), S('inplace_op', 'sigmoid', (6, 11), ('intermediate', 'base', 'flat', 'ceil#0')), S('detach', 'clone', (0, 3))], (11, 11, 4)),
    # issue 25, fuzzer program 811: error today: step 0: eager succeeded, jit raised UnsupportedError: return entry.fn(target, *args, **kwargs) 
    ([S('native_op', 'rowsum', (8, 10), ('intermediate', 'view_made_before', 'clamp_max#1')), S('inplace', 'clone', (4, 3)), S('native_op', 'exp', (2, 2), ('buffer', 'view_made_before', 'clamp_max#1'))], (0, 5)),
    # issue 25, fuzzer program 851: error today: step 0: eager succeeded, jit raised UnsupportedError: return entry.fn(target, *args, **kwargs) 
    ([S('inplace_op', 'tanh', (0, 1), ('intermediate', 'base', 'narrow', 'atan#0'))], (2, 3)),
    # issue 25, fuzzer program 860: error today: step 0: eager succeeded, jit raised UnsupportedError: return entry.fn(target, *args, **kwargs) 
    ([S('enable_grad', 'flat', (5, 12)), S('inplace_op', 'center', (7, 1), ('after_fallback', 'base', 'permute', 'xlogy#0')), S('no_grad', 'rowsum', (12, 7)), S('unary', 'relu', (11, 12)), S('custom', 'relu', (1, 7)), S('enable_grad', 'clone', (5, 5))], (8, 4)),
    # issue 25, fuzzer program 944: error today: step 0: eager succeeded, jit raised UnsupportedError: return entry.fn(target, *args, **kwargs) 
    ([S('buffer', 'center', (8, 9)), S('inplace_op', 'neg', (0, 9), ('intermediate', 'view_made_before', 'narrow', 'tril#1')), S('custom', 'clone', (7, 12)), S('no_grad', 'abs', (9, 11))], (7, 4)),
    # issue 25, fuzzer program 1044: error today: step 0: eager succeeded, jit raised TorchOpIndexError: t[index] = v /  shape mismatch: indexing
    ([S('unary', 'tanh', (10, 9)), S('config', 'tanh', (10, 2)), S('reverse', 'sigmoid', (8, 6)), S('setitem', 'square', (10, 3), ('intermediate', 'base', 'id', (('ellipsis',), ('none',), ('list', (2, -2, -2)), ('bool0', True), ('slice', None, None, None)), 'scalar', '=', (1, 3, 4))), S('binary', 'where', (4, 10)), S('data', 'rowsum', (11, 1))], (0, 6)),
    # issue 25, fuzzer program 1050: error today: step 0: eager succeeded, jit raised UnsupportedError: return entry.fn(target, *args, **kwargs) 
    ([S('native_op', 't_t', (12, 8), ('intermediate', 'view_made_before', 'ge#1')), S('inplace_op', 't_t', (8, 11), ('intermediate', 'view_made_before', 'cols', 'tanh#0')), S('flag', 'softmax', (0, 10)), S('flag', 'softmax', (10, 1)), S('native_op', 'sigmoid', (1, 12), ('buffer', 'base', 'ge#1')), S('flag', 't_t', (10, 10))], (5, 4)),
    # issue 25, fuzzer program 1078: error today: step 0: eager succeeded, jit raised RuntimeError: torch.functional.unique: its outputs [((5,), 
    ([S('datadep', 'square', (7, 1), ('unique',))], (4, 3)),
    # issue 25, fuzzer program 1096: error today: step 0: eager succeeded, jit raised UnsupportedError: t[index] *= v /  in-place ltorch.mul_ on 
    ([S('setitem', 'exp', (0, 9), ('intermediate', 'base', 'step', (('none',), ('int', 0)), 'scalar', '*=', (1, 4)))], (0, 0, 3)),
    # issue 25, fuzzer program 1104: error today: step 0: eager succeeded, jit raised TorchOpIndexError: t[index] = v /  shape mismatch: indexing
    ([S('binary', 'sub', (8, 8)), S('setitem', 'square', (4, 9), ('intermediate', 'base', 'unsqueeze', (('ellipsis',), ('bool0', True), ('int_tensor', (1, 2), (-1, 0)), ('slice', 4, -2, 3), ('int_tensor', (1, 2), (0, 3))), 'scalar', '=', (1, 2, 0))), S('data', 'exp', (12, 6)), S('inplace', 'sin', (6, 9)), S('unary', 'relu', (9, 7))], (0, 4)),
    # issue 25, fuzzer program 1112: error today: step 0: eager succeeded, jit raised DataDependentControlFlowError: return x * max(y[0].tolist()
    ([S('flag', 'sigmoid', (5, 2)), S('datadep', 'exp', (6, 8), ('tolist',))], (9, 12)),
    # issue 25, fuzzer program 1146: error today: step 0: eager succeeded, jit raised UnsupportedError: return entry.fn(target, *args, **kwargs) 
    ([S('enable_grad', 'tanh', (12, 12)), S('data', 'rowsum', (10, 12)), S('inplace_op', 't_t', (3, 6), ('after_fallback', 'view_made_before', 'unfold', 'le#0')), S('unary', 'square', (11, 12)), S('unary', 'exp', (11, 12)), S('custom', 'abs', (8, 10))], (6, 3, 5)),
    # issue 25, fuzzer program 1183: error today: step 0: eager succeeded, jit raised UnsupportedError: return entry.fn(target, *args, **kwargs) 
    ([S('detach', 'rowsum', (9, 3)), S('inplace_op', 't_t', (1, 4), ('intermediate', 'view_made_before', 'flat', 'round.decimals_3#0'))], (0, 4)),
    # issue 25, fuzzer program 1186: error today: step 0: eager succeeded, jit raised UnsupportedError: return entry.fn(target, *args, **kwargs) 
    ([S('inplace_op', 'rowsum', (9, 3), ('intermediate', 'base', 'flat', 'acos#0')), S('detach', 'clone', (0, 3))], (2, 3)),
    # issue 25, fuzzer program 1221: error today: step 0: eager succeeded, jit raised UnsupportedError: return entry.fn(target, *args, **kwargs) 
    ([S('detach', 'sigmoid', (8, 6)), S('native_op', 'abs', (10, 11), ('buffer', 'base', 'add#1')), S('binary', 'where', (11, 9)), S('no_grad', 'tanh', (12, 1)), S('setitem', 'tanh', (7, 1), ('intermediate', 'base', 'unfold', (('ellipsis',),), 'double_full', '+=', (3, 2, 2))), S('requires_grad_branch', 'abs', (7, 8))], (10, 8, 4)),
    # issue 25, fuzzer program 1284: error today: step 0: eager succeeded, jit raised UnsupportedError: return entry.fn(target, *args, **kwargs) 
    ([S('inplace_op', 'sigmoid', (5, 8), ('intermediate', 'base', 'view_of_view', 'squeeze.multiple#1'))], (9, 3)),
    # issue 25, fuzzer program 1358: error today: step 0: eager succeeded, jit raised UnsupportedError: t[index] += v /  in-place ltorch.add_ on 
    ([S('no_grad', 't_t', (0, 12)), S('detach', 'sin', (0, 2)), S('setitem', 't_t', (1, 10), ('after_fallback', 'view_made_before', 'unsqueeze', (('ellipsis',), ('int', 0)), 'int_full', '+=', (1, 3)))], (4, 5)),
    # issue 25, fuzzer program 1362: error today: step 0: eager succeeded, jit raised UnsupportedError: t[index] += v /  indexing with a boolean 
    ([S('no_grad', 't_t', (0, 12)), S('setitem', 't_t', (0, 2), ('intermediate', 'base', 'cols', (('data_mask',),), 'scalar', '+=', ())), S('flag', 'flat', (0, 1))], (0, 4)),
    # issue 25, fuzzer program 1387: error today: step 0: eager succeeded, jit raised UnsupportedError: return entry.fn(target, *args, **kwargs) 
    ([S('inplace_op', 'sigmoid', (2, 4), ('buffer', 'base', 'step', 'fmod#0')), S('requires_grad_branch', 'square', (1, 11))], (0, 3)),
    # issue 25, fuzzer program 1450: error today: step 0: eager succeeded, jit raised UnsupportedError: t[index] *= v /  indexing with a boolean 
    ([S('unary', 'rowsum', (6, 6)), S('unary', 'square', (8, 5)), S('setitem', 'exp', (12, 7), ('after_fallback', 'base', 'cols', (('none',), ('bool0', True), ('slice', None, None, 1)), 'scalar', '*=', (1, 1, 3, 2)))], (12, 5)),
    # issue 25, fuzzer program 1470: error today: step 0: eager succeeded, jit raised UnsupportedError: return entry.fn(target, *args, **kwargs) 
    ([S('inplace_op', 'softmax', (8, 2), ('intermediate', 'base', 'flat', 'addcmul#0')), S('no_grad', 'tanh', (1, 0)), S('no_grad', 'flat', (0, 0)), S('unary', 'sin', (0, 9)), S('reverse', 'sin', (0, 7))], (0, 3)),
    # issue 25, fuzzer program 1490: error today: step 0: eager succeeded, jit raised DataDependentControlFlowError: return x * y.sum().item() / 
    ([S('datadep', 'floor', (12, 9), ('item',))], (3,)),
    # issue 25, fuzzer program 1565: error today: step 0: eager succeeded, jit raised UnsupportedError: return entry.fn(target, *args, **kwargs) 
    ([S('inplace_op', 'flat', (1, 2), ('buffer', 'view_made_before', 'flat', 't#1')), S('detach', 'abs', (11, 7)), S('no_grad', 'relu', (2, 9)), S('detach', 'rowsum', (6, 9)), S('detach', 'square', (9, 0)), S('data', 'clone', (0, 2))], (2, 3)),
    # issue 25, fuzzer program 1590: error today: step 0: eager succeeded, jit raised UnsupportedError: r, c = torch.where(x > y) /  torch.where(
    ([S('datadep', 'softmax', (9, 8), ('where1',)), S('detach', 'sin', (6, 0))], (2, 3)),
    # issue 25, fuzzer program 1600: error today: step 0: eager succeeded, jit raised UnsupportedError: v[m] = y[m] * 2 /  indexing with a boolea
    ([S('datadep', 'center', (2, 1), ('mask_assign_source',))], (3,)),
    # issue 25, fuzzer program 1641: error today: step 0: eager succeeded, jit raised UnsupportedError: return entry.fn(target, *args, **kwargs) 
    ([S('inplace_op', 'abs', (1, 12), ('intermediate', 'base', 'step', 'erfc#0')), S('data', 't_t', (11, 12)), S('flag', 'abs', (9, 6)), S('flag', 'abs', (10, 2))], (2, 10)),
    # issue 25, fuzzer program 1645: error today: step 0: eager succeeded, jit raised UnsupportedError: return entry.fn(target, *args, **kwargs) 
    ([S('inplace_op', 'flat', (6, 3), ('intermediate', 'base', 'cols', 'cumsum#1')), S('detach', 'flat', (7, 5))], (12, 3)),
    # issue 25, fuzzer program 1686: error today: step 0: eager succeeded, jit raised UnsupportedError: return entry.fn(target, *args, **kwargs) 
    ([S('inplace_op', 'relu', (6, 8), ('after_fallback', 'view_made_before', 'view_of_view', 'lt#0'))], (4, 3)),
    # issue 25, fuzzer program 1691: error today: step 0: eager succeeded, jit raised UnsupportedError: return entry.fn(target, *args, **kwargs) 
    ([S('config', 'sin', (8, 7)), S('config', 't_t', (4, 9)), S('inplace_op', 'center', (7, 5), ('after_fallback', 'base', 'view_of_view', 'asin#0'))], (8, 10, 5)),
    # issue 25, fuzzer program 1815: error today: step 0: eager succeeded, jit raised UnsupportedError: return x + x[x > 0].sum() /  indexing wit
    ([S('binary', 'lerp', (12, 5)), S('datadep', 'exp', (10, 2), ('mask_read',))], (9, 3)),
    # issue 25, fuzzer program 1881: error today: step 0: eager succeeded, jit raised RuntimeError: torch.Tensor.nonzero: its outputs [((7, 2), t
    ([S('datadep', 'rowsum', (9, 11), ('nonzero',)), S('reverse', 'relu', (6, 12))], (7, 3)),
    # issue 25, fuzzer program 1936: error today: step 0: eager succeeded, jit raised TraceError: t[index] = v /  torch.Tensor.__setitem__ has no
    ([S('buffer', 'floor', (1, 6)), S('unary', 'neg', (11, 0)), S('config', 'floor', (12, 5)), S('config', 'rowsum', (2, 0)), S('setitem', 'flat', (12, 11), ('intermediate', 'view_made_before', 'unsqueeze', (('bool0', False), ('int', 0), ('int', 0)), 'scalar', '=', (0, 4)))], (0, 7)),
    # issue 25, fuzzer program 1938: error today: step 0: eager succeeded, jit raised UnsupportedError: return entry.fn(target, *args, **kwargs) 
    ([S('native_op', 'floor', (1, 0), ('buffer', 'view_made_before', 'index_fill#1'))], (11, 5)),
    # issue 25, fuzzer program 1965: error today: step 0: eager succeeded, jit raised UnsupportedError: return entry.fn(target, *args, **kwargs) 
    ([S('reverse', 'abs', (12, 3)), S('enable_grad', 'sin', (8, 10)), S('inplace_op', 'abs', (8, 4), ('intermediate', 'base', 'unsqueeze', 'log#0'))], (12, 5)),
    # logical_and_ of a tensor that requires grad: eager's graph has no edge to ``other``
    # (no .grad), torch.autograd.grad's allow_unused had given it a zero gradient
    ([S('data', 'abs', (11, 5)), S('no_grad', 'tanh', (9, 10)), S('reverse', 'rowsum', (4, 5)), S('requires_grad_branch', 'square', (2, 6)), S('native_op', 't_t', (1, 5), ('intermediate', 'base', 'logical_and#1'))], (6, 7)),
    ([S('inplace_op', 'abs', (0, 1), ('intermediate', 'base', 'col_neg', 'logical_and#0'))], (0, 3)),
    # (open until bools became index tensors, as ATen reads them)
    # t[..., True, int_tensor, slice, int_tensor] *= v on an unsqueezed intermediate
    ([S('binary', 'sub', (8, 8)), S('setitem', 'square', (4, 9), ('intermediate', 'base', 'unsqueeze', (('ellipsis',), ('bool0', True), ('int_tensor', (1,), (-1,)), ('none',), ('slice', 4, -2, 3), ('int_tensor', (1, 2), (-4, 1))), 'double_full', '*=', (1, 2, 1, 0))), S('data', 'square', (6, 6)), S('requires_grad_branch', 'neg', (9, 7)), S('buffer', 'sigmoid', (7, 6))], (3, 4)),
    # (open until bools became index tensors, as ATen reads them)
    # t[..., True, int_tensor, slice, int_tensor] *= v on an unsqueezed intermediate
    ([S('binary', 'sub', (8, 8)), S('setitem', 'square', (4, 9), ('intermediate', 'base', 'unsqueeze', (('ellipsis',), ('bool0', True), ('int_tensor', (1, 2), (-1, 0)), ('slice', 4, -2, 3), ('int_tensor', (1, 2), (-4, 1))), 'double_full', '*=', (1, 2, 0))), S('data', 'square', (6, 6)), S('requires_grad_branch', 'neg', (9, 0)), S('buffer', 'sigmoid', (7, 6))], (3, 4)),
    # (open until bools became index tensors) t[True, bool_mask] *= v on a row view
    ([S('binary', 'lerp', (4, 10)), S('reverse', 'center', (11, 11)), S('setitem', 'exp', (7, 11), ('intermediate', 'view_made_before', 'row', (('bool0', True), ('bool_tensor', (4,), (True, False, False, False))), 'scalar', '*=', (1,))), S('flag', 'square', (4, 7)), S('setitem', 'sigmoid', (0, 3), ('after_fallback', 'base', 'unsqueeze', (('ellipsis',),), 'int_scalar', '=', (1, 3, 4)))], (6, 7)),
    # (open until bools became index tensors) t[..., bool_mask, True, True, 2] *= v
    ([S('buffer', 'floor', (1, 6)), S('unary', 'neg', (11, 0)), S('flag', 'floor', (12, 5)), S('config', 'rowsum', (2, 0)), S('setitem', 'flat', (12, 11), ('intermediate', 'view_made_before', 'unsqueeze', (('ellipsis',), ('bool_tensor', (3,), (False, True, True)), ('bool0', True), ('bool0', True), ('int', 2)), 'int_full', '*=', (1, 2)))], (8, 7)),
    # copysign_ of a view of an intermediate: eager gives ``other`` a zero gradient
    # (derivatives.yaml: zeros_like(other)), the chain rule through the sign bit none
    ([S('unary', 'abs', (0, 0)), S('inplace_op', 'abs', (0, 1), ('intermediate', 'base', 'col_neg', 'copysign#0'))], (0, 4)),
    # issue 25, fuzzer program 181 (session 11's run): a mask index_put_ of several int64
    # values into float32: eager's dtype error
    ([S('setitem', 'abs', (3, 3), ('after_fallback', 'view_made_before', 'cols', (('bool_tensor', (3,), (True, False, True)),), 'int_full', '=', (2, 2))), S('unary', 'center', (8, 9)), S('inplace', 'neg', (8, 4)), S('binary', 'add', (8, 8)), S('data', 'center', (1, 2)), S('datadep', 'sigmoid', (3, 1), ('item',))], (9, 8)),
    # issue 25, fuzzer program 238 (session 11's run): eq_ where only ``other`` requires
    # grad: eager's zero gradient for it (ATen runs it)
    ([S('reverse', 'center', (2, 12)), S('inplace_op', 'exp', (10, 5), ('intermediate', 'base', 'step', 'eq#0')), S('inplace_op', 'center', (9, 11), ('intermediate', 'base', 'cols', 'clamp_min#0'))], (12, 2, 4)),
    # issue 25, fuzzer program 614 (session 11's run): t[False, True, 2] += v: an empty
    # index_put_ keeps the value in eager's graph
    ([S('setitem', 'sin', (12, 7), ('intermediate', 'view_made_before', 'col_neg', (('bool0', False), ('bool0', True), ('int', 2)), 'double_full', '+=', (0,))), S('requires_grad_branch', 'sin', (8, 6)), S('datadep', 'floor', (0, 7), ('mask_read',)), S('detach', 'abs', (3, 0))], (3,)),
    # issue 25, fuzzer program 898 (session 11's run): t[True, True, 5] *= v on a flat view:
    # wrote t[0] (bools read as None, a silent wrong value)
    ([S('setitem', 'square', (5, 10), ('intermediate', 'base', 'flat', (('bool0', True), ('bool0', True), ('int', 5)), 'last_dim', '*=', (1,))), S('flag', 'square', (6, 5))], (5, 5, 3)),
    # issue 25, fuzzer program 1458 (session 11's run): t[None, mask] = one int64 value:
    # masked_fill_ converts it (no dtype error)
    ([S('data', 'flat', (5, 2)), S('setitem', 'sigmoid', (8, 1), ('buffer', 'view_made_before', 'diagonal', (('none',), ('bool_tensor', (3,), (False, False, True))), 'int_full', '=', (1, 1))), S('reverse', 'center', (11, 5))], (9, 4)),
    # logit_ of the buffer: the generator now writes a buffer into the op's domain first
    ([S('inplace_op', 'softmax', (12, 1), ('buffer', 'base', 'col_neg', 'logit#0'))], (4, 3)),
    # the 2,000-program batched run: t[i] = v with i a 0-d integer tensor and v float64 (a
    # select and copy_ in eager, which converts) raised index_put_'s dtype error
    ([S('setitem', 'rowsum', (11, 4), ('buffer', 'view_made_before', 't_select',
                                       (('int0_tensor', 0),), 'double_full', '=', ())),
      S('unary', 'square', (11, 4)), S('buffer', 'floor', (11, 9))], (0, 3)),
    # Session 15: OPEN's one open kind, fixed. Eager's backward raises "modified by an
    # inplace operation" for a tensor saved for backward and then written; the jit's ran,
    # because the eager twin graph (frontend/differentiability.py) that reproduces the
    # check was cut or could not run: a view written with a value that requires grad got
    # no twin of its base (then the base's other views neither), a custom
    # autograd.Function's outputs had no twin, and the twin backward stopped at a meta
    # kernel IndexPutBackward0 lacks (nonzero of a bool mask). The checks now unpack the
    # saved tensors without running backward kernels (_stale_saved_variable).
    # fuzzer program 1736 of the first 2,000-program batched run: the
    # buffer saved for backward by `buf * b`, then written in place (eager's backward raises
    # "modified by an inplace operation"), reaches the output only through a value written
    # into zeros_like(...) under a data-dependent mask (`z[z_view > 0] = v.sum() * 0.1`):
    # the jit's backward ran. Without the masked write (the value an output itself) the
    # jit raised as eager does (REGRESSIONS' fourth program). Programs 569-572 of that run
    # are of the same kind (the value `v.sum() * 0.1` written into a permuted view by
    # `t[[1, 1, 1]] = v`)
    ([S('reverse', 'relu', (10, 1)), S('detach', 'abs', (0, 1)), S('buffer', 'tanh', (10, 6)),
      S('buffer', 'tanh', (3, 10)),
      S('setitem', 'relu', (3, 12), ('zeros_like', 'base', 'narrow', (('data_mask',),),
                                     'zero_d', '=', ()))], (0, 7)),
    ([S('buffer', 'sin', (9, 3)), S('buffer', 't_t', (1, 7)), S('flag', 'tanh', (12, 5)),
      S('buffer', 'rowsum', (0, 7)), S('binary', 'lerp', (12, 8)),
      S('setitem', 'square', (5, 3), ('after_fallback', 'view_made_before', 'permute',
                                      (('list', (1, 1, 1)),), 'zero_d', '=', (3, 3, 2)))],
     (0, 8)),
    ([S('buffer', 'sin', (9, 3)), S('buffer', 't_t', (1, 7)), S('flag', 'tanh', (12, 5)), S('no_grad', 'rowsum', (0, 7)), S('binary', 'lerp', (12, 8)), S('setitem', 'square', (5, 3), ('after_fallback', 'view_made_before', 'permute', (('list', (1, 1, 1)),), 'zero_d', '=', (3, 3, 2)))], (0, 8)),
    ([S('buffer', 'sin', (9, 3)), S('buffer', 't_t', (1, 7)), S('flag', 'tanh', (12, 5)), S('buffer', 'rowsum', (0, 7)), S('binary', 'lerp', (12, 8)), S('setitem', 'square', (5, 3), ('after_fallback', 'view_made_before', 'permute', (('list', (1, 1, 1)),), 'zero_d', '=', (3, 3, 2)))], (1, 8)),
    ([S('buffer', 'sin', (9, 3)), S('buffer', 't_t', (1, 7)), S('flag', 'tanh', (12, 5)), S('buffer', 'rowsum', (0, 1)), S('binary', 'lerp', (12, 8)), S('setitem', 'square', (5, 3), ('after_fallback', 'view_made_before', 'permute', (('list', (1, 1, 1)),), 'zero_d', '=', (3, 3, 2)))], (1, 8)),
    # program 1265 of that run, the same kind at its second call: the buffer saved by
    # `buf * v` flows into `v[m] = y[m] * 2` (a data-dependent masked write) of another
    # statement's value, then the buffer is written: eager's backward raises, the jit's ran
    ([S('datadep', 'neg', (2, 7), ('any_branch',)),
      S('datadep', 'sigmoid', (7, 9), ('mask_assign_source',)), S('enable_grad', 'exp', (3, 1)),
      S('buffer', 'square', (3, 8))], (11,)),
    # program 237 of the default run, found by the clean-clone CI run of the merged tree
    # (not found by the helper's runs of the same draw): eager's backward raises "modified
    # by an inplace operation" (a [3, 4] buffer at version 2), the jit's ran: the buffer
    # saved by a custom autograd.Function's forward
    ([S('reverse', 'rowsum', (1, 2)), S('custom', 'square', (11, 6)),
      S('reverse', 'softmax', (5, 7)), S('buffer', 'clone', (12, 7)),
      S('binary', 'sub', (10, 8))], (2, 4)),
    # programs 877-881 of the first 2,000-program CI run: `logical_or_` (no derivative:
    # eager runs it on a leaf that requires grad, which stays a leaf) into a view of the
    # leaf input, after `a * a.data` saved `a.data`: eager's backward reads the written
    # memory (`.data` has no version check). The jit refused any write into such a leaf,
    # and its backward read `a.data` as it was (test_data_reads.py)
    ([S('data', 't_t', (0, 6)), S('binary', 'maximum', (10, 5)),
      S('enable_grad', 'relu', (5, 10)),
      S('native_op', 'rowsum', (6, 8), ('leaf', 'base', 'logical_or#1'))], (1, 10, 6)),
    ([S('data', 'rowsum', (0, 6)), S('binary', 'maximum', (10, 5)),
      S('enable_grad', 'rowsum', (8, 10)),
      S('native_op', 'rowsum', (6, 8), ('leaf', 'base', 'logical_or#1'))], (0, 6)),
    # programs 1043 and 1659 of the survey of the first fix, which accepted every write into
    # a leaf input that eager's replay did not refuse: `t[...] = v` into a view of the leaf
    # (eager raises "a view of a leaf Variable that requires grad is being used in an
    # in-place operation"). A write is accepted only where eager runs it on such a leaf
    # (differentiability._leaf_write_accepted)
    ([S('setitem', 'center', (1, 12), ('leaf', 'view_made_before', 'unsqueeze',
                                       (('int0_tensor', 0), ('int', 0), ('int', 2)),
                                       'int_scalar', '=', ())),
      S('enable_grad', 'center', (6, 0)), S('flag', 'relu', (6, 1)),
      S('buffer', 'relu', (3, 11)), S('detach', 'abs', (4, 7)),
      S('datadep', 'relu', (0, 6), ('branch',))], (8,)),
    ([S('reverse', 'softmax', (9, 12)), S('datadep', 'floor', (3, 10), ('unique',)),
      S('binary', 'where', (10, 7)),
      S('setitem', 'floor', (4, 11), ('leaf', 'base', 'unsqueeze',
                                      (('ellipsis',), ('bool0', True), ('int0_tensor', 0),
                                       ('bool_tensor', (3,), (False, True, False)),
                                       ('int', 0)), 'scalar', '*=', (1,)))], (0, 4)),
    # Session 19 (formerly OPEN), fuzzer programs 1524-1526: `t[...] += v` into a view `t`
    # of an intermediate that did not require grad, `v` requiring grad. Eager raises "a
    # leaf Variable that requires grad is being used in an in-place operation" from
    # `t.__setitem__`: `t[...]` is a new view (at::alias), the write through it makes the
    # base require grad, and `t`'s grad_fn is regenerated only lazily, so check_inplace
    # reads `t` as a leaf (torch.compile raises it too). The jit's `t[...]` returned `t`
    # itself and its view twins were made after the write: both are eager's now
    # (aliasing.separate_returned_inputs, differentiability._view_twins_before_write)
    ([S('setitem', 't_t', (8, 3), ('intermediate', 'view_made_before', 'row', (('ellipsis',),),
                                   'last_dim', '+=', (4,)))], (9, 3)),
]


# Differences the fuzzer found that are still open (issue 25's closing note lists them):
# each is run and reported as skipped with its reason, so it is seen, not forgotten; the
# random programs' test prints, and does not fail on, a drawn program listed here.
OPEN: list = [
]


# Drawn programs whose difference is float32 rounding, not a defect: the random programs'
# test prints them and goes on (they may match eager on another machine: XLA's thread count
# changes its float32 rounding).
ROUNDING: list = [
    # Session 18, program 428 of the draw with the `checkpoint` and `copy_then_write`
    # statements: one gradient element off by 1.5e-5 (1e-5 allowed) at the second call,
    # after addcdiv_ on an unfold view, exp and softmax. Against float64 (the same inputs),
    # the jit's gradient is off by at most 9.0e-7 and eager's by 3.8e-6: eager's float32
    # rounding, not a jit defect
    ([S('inplace_op', 'exp', (3, 12), ('after_fallback', 'base', 'unfold', 'addcdiv#1')),
      S('unary', 'softmax', (11, 9)), S('enable_grad', 'center', (8, 5))], (4, 4, 3)),
    # programs 1101-1102 of the first 2,000-program batched run: the harness's float32
    # tolerance, not a jit defect: `(v - v.mean(0)) * v` summed over a row (values ~20-60,
    # cancelling) differs from eager by 2e-6 relative (rtol 1.3e-6) in one element: XLA's
    # reduction order. The harness would need a float64 reference to tell rounding from error
    ([S('custom', 'neg', (7, 3)), S('detach', 'center', (11, 11)), S('flag', 'rowsum', (9, 9)),
      S('flag', 'tanh', (2, 1))], (5,)),
    ([S('custom', 'neg', (7, 3)), S('detach', 'center', (11, 11)), S('custom', 'rowsum', (9, 9)),
      S('flag', 'tanh', (2, 1))], (5,)),
]


@pytest.mark.parametrize("stmts,outs", REGRESSIONS, ids=range(len(REGRESSIONS)))
def test_regression(stmts, outs):
    check_program(stmts, outs)


if OPEN:  # (none open now: no test, rather than pytest's skip of an empty parameter set)
    @pytest.mark.parametrize("stmts,outs", OPEN, ids=range(len(OPEN)))
    def test_open_difference_still_differs(stmts, outs):
        """An open difference: skipped with the program printed while it still differs,
        and a failure once it matches eager (then it belongs in REGRESSIONS)."""
        try:
            check_program(stmts, outs)
        except Exception as e:  # noqa: BLE001 - reported below
            pytest.skip(f"open difference: {stmts!r}: {str(e).splitlines()[0][:200]}")
        pytest.fail("this program now matches eager: move it from OPEN to REGRESSIONS")


STEPS = [Step(), Step(before=fp.change_globals)]


def draw_programs(n: int) -> list[Program]:
    """The first ``n`` programs hypothesis draws (``derandomize``: the same in every run),
    numbered from 1 in draw order."""
    drawn = []

    @settings(max_examples=n, deadline=None, derandomize=True, database=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(fp.programs())
    def draw(prog):
        drawn.append(prog)

    draw()
    return [Program(i + 1, *p) for i, p in enumerate(drawn)]


def _check_drawn_one_at_a_time():
    """THUNDER_FUZZ_SHRINK=1: each program checked alone inside hypothesis, which shrinks
    the first differing program to a shorter one."""
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              phases=[Phase.generate, Phase.shrink], suppress_health_check=list(HealthCheck))
    @given(fp.programs())
    def prop(prog):
        check_program(*prog)

    prop()


def test_random_programs_match_eager():
    t0 = time.perf_counter()
    print(f"\nfuzzer: {fuzz_opdb.describe()} (table built in {time.perf_counter() - t0:.0f} s)")
    if SHRINK and not COLLECT:
        _check_drawn_one_at_a_time()
        return
    t0 = time.perf_counter()
    programs = draw_programs(EXAMPLES)
    batches = plan(programs)
    found = []
    for batch in batches:
        for d in check_batch(batch, STEPS, lambda p: check_program(p.stmts, p.outs)):
            if any(list(d.program.stmts) == list(s) and tuple(d.program.outs) == tuple(o)
                   for s, o in OPEN + ROUNDING):  # listed (OPEN: run and skipped by its test)
                print(f"program {d.program.number}: listed in OPEN or ROUNDING: {d.message}")
                continue
            found.append(d)
            print(f"program {d.program.number}: {d.kind}: "
                  f"{(d.program.stmts, d.program.outs)!r}\n    {d.message}", flush=True)
        if found and not COLLECT:
            d = found[0]
            raise AssertionError(
                f"fuzzer program {d.program.number} differs from eager ({d.kind}): "
                f"{d.message}\n  program: {(d.program.stmts, d.program.outs)!r}") from d.error
    elapsed = time.perf_counter() - t0
    if found:
        kinds = {k: sum(1 for f in found if f.kind == k) for k in ("wrong value", "error")}
        first = min((f.program.number for f in found if f.kind == "wrong value"), default=None)
        print(f"\nfuzzer: {len(found)} of {len(programs)} programs differ from eager ({kinds}) "
              f"in {elapsed:.0f} s; first wrong value at program {first}")
    assert not found, f"{len(found)} programs differ from eager"
    print(f"\nfuzzer: {len(programs)} programs matched eager in {elapsed:.0f} s "
          f"({len(batches)} jitted functions)")
    assert len(programs) >= EXAMPLES
