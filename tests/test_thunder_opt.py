"""Tests of ``thunder-opt``: the FileCheck files' RUN lines, error reporting, and that every
stage ``jit`` shows in ``last_traces`` is reproduced by ``thunder-opt -p <pass>``.

The ``.mlir`` files under ``tests/passes`` and ``tests/dialect`` are run lit-style: each
``// RUN:`` line is a pipeline of ``thunder-opt`` and ``filecheck`` commands (``%s`` is the
file; ``not CMD`` expects failure; ``2>&1`` merges stderr). Commands run as
``sys.executable -m ...``, so the tests do not depend on PATH.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
import torch
from torch_mlir import ir

import thunder_mlir
from conftest import unregistered_cumprod
from thunder_mlir.ir.context import get_context
from thunder_mlir.frontend.symbols import SYMBOLS
from thunder_mlir.ir.dialect import Thunder
from thunder_mlir.ir.primdef import PRIM_OPS
from thunder_mlir.transforms.registry import PASSES
from thunder_mlir.tools.thunder_opt import main as thunder_opt_main

TESTS = Path(__file__).parent
MLIR_FILES = sorted((TESTS / "passes").glob("*.mlir")) + sorted((TESTS / "dialect").glob("*.mlir"))
ROUNDTRIP = TESTS / "dialect" / "roundtrip.mlir"
TOOLS = {
    "thunder-opt": [sys.executable, "-m", "thunder_mlir.tools.thunder_opt"],
    "filecheck": [sys.executable, "-m", "filecheck"],
}


# ------------------------------------------------------------------ lit-style runner
def run_lines(path: Path) -> list[str]:
    """The ``// RUN:`` commands of a test file."""
    return [m.group(1).strip() for m in re.finditer(r"^//\s*RUN:(.*)$", path.read_text(), re.M)]


def thunder_opt_in_process(args: list[str], stdin: str) -> subprocess.CompletedProcess:
    """thunder-opt's ``main`` run in this process on ``stdin`` (its output is written through
    ``sys.stdout``/``sys.stderr``): a RUN line's thunder-opt without an interpreter start-up
    (5-10 s each on CI's 2 cores, importing torch and jax). The fresh-process behaviour has
    tests of its own (``thunder_opt_process``, the console-script tests)."""
    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = thunder_opt_main(list(args))
            except SystemExit as e:  # argparse's usage errors
                code = e.code if isinstance(e.code, int) else 2
            except Exception:  # noqa: BLE001 - a crash: reported as the process would
                traceback.print_exc()
                code = 1
    finally:
        sys.stdin = saved
    return subprocess.CompletedProcess(["thunder-opt", *args], code, out.getvalue(),
                                       err.getvalue())


def run_pipeline(command: str, path: Path) -> tuple[bool, str]:
    """Run one RUN line; returns (success, a report of what each command printed).
    thunder-opt runs in this process (``thunder_opt_in_process``), filecheck as a
    subprocess."""
    data, report = "", []
    for stage in command.replace("%s", shlex.quote(str(path))).split("|"):
        words = shlex.split(stage)
        expect_failure = words[0] == "not"
        words = words[1:] if expect_failure else words
        merge_stderr = "2>&1" in words
        words = [w for w in words if w != "2>&1"]
        if words[0] not in TOOLS:
            raise ValueError(f"{path.name}: unknown command '{words[0]}' in RUN line")
        if words[0] == "thunder-opt":
            proc = thunder_opt_in_process(words[1:], data)
        else:
            proc = subprocess.run(TOOLS[words[0]] + words[1:], input=data,
                                  capture_output=True, text=True, timeout=300)
        report.append(f"$ {stage.strip()}  (exit {proc.returncode})\n{proc.stderr}")
        if (proc.returncode != 0) != expect_failure:
            return False, "\n".join(report)
        data = proc.stdout + (proc.stderr if merge_stderr else "")
    return True, "\n".join(report)


RUN_CASES = [pytest.param(path, cmd, id=f"{path.parent.name}/{path.name}:RUN{i}")
             for path in MLIR_FILES for i, cmd in enumerate(run_lines(path))]


def test_every_file_has_run_lines():
    assert {p.name for p in MLIR_FILES} >= {"decompose.mlir", "partition.mlir", "grad.mlir",
                                           "lower_to_stablehlo.mlir", "roundtrip.mlir"}
    for path in MLIR_FILES:
        assert run_lines(path), f"{path} has no // RUN: line"


@pytest.mark.parametrize("path,command", RUN_CASES)
def test_filecheck(path: Path, command: str):
    ok, report = run_pipeline(command, path)
    assert ok, f"RUN line failed: {command}\n{report}"


def test_runner_detects_a_failing_check(tmp_path: Path):
    """The runner must be able to fail: a CHECK that does not hold is reported."""
    bad = tmp_path / "bad_check.mlir"
    bad.write_text(
        "// RUN: thunder-opt %s | filecheck %s\n"
        "// CHECK: thunder.mul\n"
        "func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {\n"
        '  %0 = "thunder.add"(%a, %a) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>\n'
        "  return %0 : tensor<2xf32>\n}\n")
    ok, report = run_pipeline(run_lines(bad)[0], bad)
    assert not ok and "thunder.mul" in report


# ------------------------------------------------------------------------- round trip
def _dialect_op_names() -> set[str]:
    names = {f"thunder.{n}" for n in PRIM_OPS}
    return names | {op.OPERATION_NAME for op in Thunder.operations}


def test_roundtrip_covers_every_op():
    """roundtrip.mlir uses and CHECKs every op of the dialect (fails when one is added)."""
    with get_context():
        module = ir.Module.parseFile(str(ROUNDTRIP))
    used: set[str] = set()

    def visit(op):
        used.add(op.name)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    checks = "\n".join(line for line in ROUNDTRIP.read_text().splitlines()
                       if line.startswith("// CHECK"))
    missing = sorted(_dialect_op_names() - used)
    assert not missing, f"ops missing from {ROUNDTRIP.name}: {missing}"
    unchecked = sorted(n for n in _dialect_op_names() if f'"{n}"' not in checks)
    assert not unchecked, f"ops without a CHECK line in {ROUNDTRIP.name}: {unchecked}"


def test_roundtrip_print_parse_print_is_stable():
    with get_context():
        first = ir.Module.parseFile(str(ROUNDTRIP)).operation.get_asm(enable_debug_info=True)
        second = ir.Module.parse(first).operation.get_asm(enable_debug_info=True)
    assert first == second


# ----------------------------------------------------------------------- error cases
def thunder_opt_process(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    """Run thunder-opt as a subprocess (a fresh interpreter: real exit codes and stderr)."""
    return subprocess.run(TOOLS["thunder-opt"] + list(args), input=stdin, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture
def thunder_opt():
    """Run thunder-opt's ``main`` in this process (``thunder_opt_in_process``)."""
    def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
        return thunder_opt_in_process(list(args), stdin)
    return run


def assert_clean_error(proc: subprocess.CompletedProcess, code: int, *needles: str) -> None:
    """Exit ``code``, a ``thunder-opt: error`` message holding ``needles``, no traceback."""
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "thunder-opt: error:" in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in proc.stderr, f"{needle!r} not in:\n{proc.stderr}"
    assert proc.stdout == ""


ADD_FN = """func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {
  %0 = "thunder.add"(%a, %a) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}
"""


@pytest.mark.parametrize("body,line_col,message", [
    ('  %0 = "thunder.neg"(%a) : (tensor<2xf32>) -> tensor<2xf32>\n'
     '  %1 = "thunder.exp"(%0) : (tensor<3xf32>) -> tensor<3xf32>\n',
     ":3:22:", "use of value '%0' expects different type than prior uses"),
    ('  %0 = "thunder.add"(%a) : (tensor<2xf32>) -> tensor<2xf32>\n', ":2:8:",
     "expects exactly 2 operands"),
], ids=["type-mismatch", "wrong-arity"])
def test_invalid_ir(thunder_opt, tmp_path: Path, body: str, line_col: str, message: str):
    src = tmp_path / "bad.mlir"
    src.write_text("func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {\n" + body +
                   "  return %a : tensor<2xf32>\n}\n")
    proc = thunder_opt(str(src), "-p", "decompose")
    assert_clean_error(proc, 1, f"{src}{line_col} error: ", message)


# Prims whose types break their PrimDef inference (primdef.verify_prim_ops): MLIR's own
# verifier accepts them (the IRDL fields only say "a tensor").
_F32 = "tensor<2x3xf32>"


@pytest.mark.parametrize("body,message", [
    ('  %0 = "thunder.add"(%a, %b) : (tensor<2xf32>, tensor<3xf32>) -> tensor<2xf32>\n',
     "'thunder.add' op operands differ: (2,)/torch.float32 vs (3,)/torch.float32"),
    ('  %0 = "thunder.exp"(%a) : (tensor<2xf32>) -> tensor<2xf64>\n',
     "'thunder.exp' op result type tensor<2xf64> differs from the inferred tensor<2xf32>"),
    ('  %0 = "thunder.lt"(%a, %a) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>\n',
     "'thunder.lt' op result type tensor<2xf32> differs from the inferred tensor<2xi1>"),
    ('  %0 = "thunder.reduce_sum"(%a) {dims = array<i64: 0>} : (tensor<2xf32>) -> '
     'tensor<2xf32>\n', "'thunder.reduce_sum' op result type tensor<2xf32> differs from the "
     "inferred tensor<f32>"),
    ('  %0 = "thunder.dot_general"(%a, %b) {lhs_batching_dimensions = array<i64>, '
     'rhs_batching_dimensions = array<i64>, lhs_contracting_dimensions = array<i64: 0>, '
     'rhs_contracting_dimensions = array<i64: 0>} : (tensor<2xf32>, tensor<3xf32>) -> '
     'tensor<f32>\n', "'thunder.dot_general' op contracting dims differ: (2,) @ (3,)"),
    ('  %0 = "thunder.where"(%a, %a, %a) : (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> '
     'tensor<2xf32>\n', "'thunder.where' op predicate must be bool"),
], ids=["add-shapes", "exp-dtype", "compare-dtype", "reduce-shape", "dot-contracting",
        "where-pred"])
def test_prim_verifier(thunder_opt, tmp_path: Path, body: str, message: str):
    """thunder-opt rejects a prim whose operand or result types its inference rejects, with
    the op's location and the rule that failed; the same text without the op verifies."""
    src = tmp_path / "bad.mlir"
    head = "func.func @f(%a: tensor<2xf32>, %b: tensor<3xf32>) -> tensor<2xf32> {\n"
    src.write_text(head + body + "  return %a : tensor<2xf32>\n}\n")
    proc = thunder_opt(str(src))
    assert_clean_error(proc, 1, f'{src}:2:8: error: ', message)
    src.write_text(head + "  return %a : tensor<2xf32>\n}\n")
    assert thunder_opt(str(src)).returncode == 0


def test_prim_verifier_runs_after_each_pass(thunder_opt, tmp_path: Path, monkeypatch):
    """A pass that leaves a prim with a wrong result type is reported after that pass."""
    from thunder_mlir.tools import thunder_opt as tool

    def corrupt(module):  # retype the add's result: tensor<2xf32> -> tensor<2xf64>
        with module.context:
            f = list(module.body.operations)[0]
            op = list(f.regions[0].blocks[0].operations)[0]
            op.results[0].set_type(ir.RankedTensorType.get([2], ir.F64Type.get()))
    src = tmp_path / "ok.mlir"
    src.write_text(ADD_FN.replace("return %0", "return %a"))  # the add's result is unused
    assert thunder_opt(str(src)).returncode == 0
    monkeypatch.setattr(tool, "build_pipeline",
                        lambda text: [tool.Stage("corrupt", "Corrupt", "corrupt", corrupt)])
    proc = thunder_opt(str(src), "-p", "corrupt")
    assert_clean_error(proc, 1, "invalid IR after pass 'corrupt'",
                       "'thunder.add' op result type tensor<2xf64> differs from the inferred "
                       "tensor<2xf32>")


def test_invalid_ir_on_stdin(thunder_opt):
    """A verifier error (not a syntax error), read from stdin."""
    proc = thunder_opt("-", stdin=ADD_FN.replace("-> tensor<2xf32> {", "-> tensor<3xf32> {"))
    assert_clean_error(proc, 1, "<stdin>:3:3: error: ", "doesn't match function result type")


def test_unknown_pass(thunder_opt, tmp_path: Path):
    src = tmp_path / "ok.mlir"
    src.write_text(ADD_FN)
    proc = thunder_opt(str(src), "-p", "decompose,no-such-pass")
    assert_clean_error(proc, 2, "unknown pass 'no-such-pass'", *PASSES)


ONE_RUN = "operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>"
RESULTS_ONE_RUN = "resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>"
T4 = "tensor<4xf32>"
STUCK_EXECUTOR_CALL = f"""func.func private @xla_region_0(%a: {T4}) -> {T4} {{
  %0 = "thunder.executor_call"(%a) {{callee = "torch.cumprod", executor = "torch",
      impl = @torch.cumprod$0, {ONE_RUN}, {RESULTS_ONE_RUN}}} : ({T4}) -> {T4}
  return %0 : {T4}
}}
"""
STUCK_COMPOSITE = f"""func.func private @xla_region_0(%a: {T4}) -> {T4} {{
  %0 = "thunder.composite"(%a) ({{
  ^bb0(%x: {T4}):
    "thunder.yield"(%x) {{{ONE_RUN}}} : ({T4}) -> ()
  }}) {{name = "ltorch.identity", {ONE_RUN}, {RESULTS_ONE_RUN}}} : ({T4}) -> {T4}
  return %0 : {T4}
}}
"""


@pytest.mark.parametrize("op,fn", [("thunder.executor_call", STUCK_EXECUTOR_CALL),
                                   ("thunder.composite", STUCK_COMPOSITE)])
def test_op_that_cannot_be_lowered(thunder_opt, tmp_path: Path, op: str, fn: str):
    src = tmp_path / "stuck.mlir"
    src.write_text(fn)
    proc = thunder_opt(str(src), "-p", "lower-to-stablehlo")
    assert_clean_error(proc, 1, "pass 'lower-to-stablehlo{computed-once=true", f"no lowering for '{op}'",
                       f'"{src}":2:8', f"\n{src}:2:8: error: lower-to-stablehlo: no lowering")


def test_usage_errors(thunder_opt, tmp_path: Path):
    assert_clean_error(thunder_opt(str(tmp_path / "missing.mlir")), 1, "cannot read")
    proc = thunder_opt("--no-such-flag")
    assert proc.returncode == 2 and "unrecognized arguments" in proc.stderr
    assert "Traceback" not in proc.stderr


# ----------------------------------------------------------------- CLI features
def test_list_passes(thunder_opt):
    proc = thunder_opt("--list-passes")
    assert proc.returncode == 0
    for p in PASSES.values():
        assert p.name in proc.stdout and p.summary in proc.stdout


def test_dumps_output_file_and_upstream_passes(thunder_opt, tmp_path: Path):
    """-o, --dump-dir, --print-ir-after-all, and an upstream pass (cse) after ours."""
    src, out, dumps = tmp_path / "in.mlir", tmp_path / "out.mlir", tmp_path / "dumps"
    src.write_text(ADD_FN.replace(
        "  return %0", '  %1 = "thunder.add"(%a, %a) : (tensor<2xf32>, tensor<2xf32>) -> '
        'tensor<2xf32>\n  %2 = "thunder.mul"(%0, %1) : (tensor<2xf32>, tensor<2xf32>) -> '
        "tensor<2xf32>\n  return %2"))
    proc = thunder_opt(str(src), "-p", "decompose,cse", "-o", str(out),
                       "--dump-dir", str(dumps), "--print-ir-after-all")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    headers = re.findall(r"^// -----// IR Dump After (.+) //----- //$", proc.stderr, re.M)
    assert headers == ["Decompose (decompose)", "cse (cse)"]
    assert sorted(p.name for p in dumps.iterdir()) == ["0_decompose.mlir", "1_cse.mlir"]
    result = out.read_text()
    assert result.count('"thunder.add"') == 1  # cse merged the duplicate (thunder ops are Pure)
    assert (dumps / "1_cse.mlir").read_text().strip() == result.strip()
    assert (dumps / "0_decompose.mlir").read_text().count('"thunder.add"') == 2


# ------------------------------------------------------------- stage reproducibility
def _program(a, b):
    c = torch.softmax(a + b, -1)
    return unregistered_cumprod(c, 0) * 2, c.sum(0)  # runs on the torch fallback


@pytest.fixture(scope="module")
def jit_stages() -> dict[str, str]:
    jfn = thunder_mlir.jit(_program)
    jfn(torch.randn(2, 3), torch.randn(2, 3))
    return {s.name: s.text for s in thunder_mlir.last_traces(jfn)}


def _without_debuginfo(text: str) -> str:
    with get_context():
        return ir.Module.parse(text).operation.get_asm(enable_debug_info=False)


@pytest.mark.parametrize("source,pass_name,expected", [
    ("initial", "decompose", "prims"),
    ("prims", "partition", "plan"),
    ("plan", "lower-to-stablehlo", "stablehlo"),
])
def test_stage_reproducible(thunder_opt, tmp_path: Path, jit_stages, source, pass_name, expected):
    """thunder-opt -p PASS on jit's stage text gives jit's next stage (modulo debug info)."""
    assert "thunder.executor_call" in jit_stages["plan"]  # the partition case is not trivial
    src = tmp_path / f"{source}.mlir"
    src.write_text(jit_stages[source])
    proc = thunder_opt(str(src), "-p", pass_name, "--mlir-print-debuginfo")
    assert proc.returncode == 0, proc.stderr
    assert _without_debuginfo(proc.stdout) == _without_debuginfo(jit_stages[expected])
    # the user's source locations recorded by the trace survive the round trip
    assert f'"{__file__}":' in proc.stdout


def test_pipeline_reproducible_in_a_fresh_process(tmp_path: Path, jit_stages):
    """The whole pipeline in a separate thunder-opt process, each stage dumped, gives
    jit's stages: no state shared with the process that traced."""
    src, dumps = tmp_path / "initial.mlir", tmp_path / "dumps"
    src.write_text(jit_stages["initial"])
    pipeline = ["decompose", "partition", "lower-to-stablehlo"]  # jit's, for this program
    proc = thunder_opt_process(str(src), "-p", ",".join(pipeline), "--dump-dir", str(dumps))
    assert proc.returncode == 0, proc.stderr
    for index, (pass_name, stage) in enumerate(zip(pipeline, ("prims", "plan", "stablehlo"))):
        dumped = (dumps / f"{index}_{pass_name}.mlir").read_text()
        assert _without_debuginfo(dumped) == _without_debuginfo(jit_stages[stage]), stage
    assert _without_debuginfo(proc.stdout) == _without_debuginfo(jit_stages["stablehlo"])


def test_exit_codes_of_the_process(tmp_path: Path):
    """Usage errors exit 2, bad input exits 1, and neither prints a Python traceback."""
    src = tmp_path / "bad.mlir"
    src.write_text(ADD_FN.replace('(%a, %a) : (tensor<2xf32>, tensor<2xf32>)',
                                  '(%a) : (tensor<2xf32>)'))
    assert_clean_error(thunder_opt_process(str(src), "-p", "nosuch"), 2,
                       "unknown pass 'nosuch'")
    assert_clean_error(thunder_opt_process(str(src)), 1, f"{src}:2:8: error: ",
                       "expects exactly 2 operands")


# ------------------------------------------------------------- passes as values
def test_pipeline_parses_to_pass_values_and_prints_back():
    """Both spellings of a pipeline give the same pass values, which print as the anchored
    pipeline (options with their values, mlir-opt's printed form)."""
    from thunder_mlir.transforms.registry import (
        Grad, Joint, Decompose, parse_pipeline, pipeline_string)

    anchored = parse_pipeline("builtin.module(decompose,grad{remat=false})")
    assert anchored == parse_pipeline("decompose, grad{remat=false}")
    assert anchored == [Decompose(), Grad(remat=False)]
    assert pipeline_string(anchored) == \
        "builtin.module(decompose,grad{remat=false save-materialized=false})"
    assert parse_pipeline("joint{keep_outputs=true}") == [Joint(keep_outputs=True)]
    assert parse_pipeline("joint{keep-outputs}") == [Joint(keep_outputs=True)]
    assert str(Joint()) == "joint{keep-outputs=false}"
    assert parse_pipeline("builtin.module()") == []


def test_execution_transform_is_a_registered_pass_with_a_list_option():
    from thunder_mlir.executors.execution_transform import ExecutionTransform
    from thunder_mlir.transforms.registry import parse_pipeline

    assert PASSES["execution-transform"] is ExecutionTransform
    (value,) = parse_pipeline("execution-transform{executors=a,b}")
    assert value == ExecutionTransform(executors=("a", "b"))
    assert value.pipeline_element() == "execution-transform{executors=a,b}"


@pytest.mark.parametrize("pipeline,message", [
    ("grda", "unknown pass 'grda' (did you mean 'grad'?)"),
    ("decompose,partiton", "unknown pass 'partiton' (did you mean 'partition'?)"),
    ("grad{rmat=true}", "pass 'grad' has no option 'rmat' (did you mean 'remat'?)"),
    ("joint{keep_output=true}", "pass 'joint' has no option 'keep_output' "
                                "(did you mean 'keep-outputs'?)"),
    ("grad{remat=yes}", "option 'remat' expects true or false, got 'yes'"),
    ("decompose{remat=true}", "pass 'decompose' has no option 'remat'"),
    ("decompose,,partition", "empty element in pass pipeline"),
])
def test_pipeline_errors_suggest(thunder_opt, pipeline: str, message: str):
    """Unknown passes and options are usage errors (exit 2) before any input is read, with
    difflib's closest name."""
    proc = thunder_opt("/nonexistent.mlir", f"--pass-pipeline=builtin.module({pipeline})")
    assert_clean_error(proc, 2, message)
    proc = thunder_opt("/nonexistent.mlir", "-p", pipeline)
    assert_clean_error(proc, 2, message)


def test_pipeline_error_raised_by_the_registry():
    from thunder_mlir.errors import PipelineError
    from thunder_mlir.transforms.registry import parse_pipeline

    with pytest.raises(PipelineError, match=r"did you mean 'lower-to-stablehlo'\?"):
        parse_pipeline("lower-to-stablhlo")


REMAT_FN = """func.func @computation(%x: tensor<4xf32>) -> tensor<4xf32> {
  %e = "thunder.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %y = "thunder.tanh"(%e) : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}
"""


def test_pass_pipeline_flag_and_its_short_form(thunder_opt):
    """--pass-pipeline='builtin.module(...)' (mlir-opt's spelling) and -p give the same
    result; the option reaches the pass (remat=false saves more residuals)."""
    long = thunder_opt("--pass-pipeline=builtin.module(decompose,grad{remat=true})",
                       stdin=REMAT_FN)
    short = thunder_opt("-p", "decompose,grad", stdin=REMAT_FN)
    anchored_p = thunder_opt("-p", "builtin.module(decompose,grad{remat=true})", stdin=REMAT_FN)
    assert long.returncode == 0, long.stderr
    assert long.stdout == short.stdout == anchored_p.stdout
    assert "thunder.num_residuals = 1 " in long.stdout
    no_remat = thunder_opt("--pass-pipeline", "builtin.module(grad{remat=false})",
                           stdin=REMAT_FN)
    assert "thunder.num_residuals = 2 " in no_remat.stdout
    both = thunder_opt("-p", "grad", "--pass-pipeline=builtin.module(grad)", stdin=REMAT_FN)
    assert_clean_error(both, 2, "give the pipeline once")


def _dump_headers(stderr: str) -> list[str]:
    return re.findall(r"^// -----// IR Dump (.+) //----- //$", stderr, re.M)


@pytest.mark.parametrize("flags,headers", [
    (["--mlir-print-ir-after-all"], ["After Decompose (decompose)", "After Grad (grad)"]),
    (["--mlir-print-ir-before-all"], ["Before Decompose (decompose)", "Before Grad (grad)"]),
    (["--mlir-print-ir-before=grad"], ["Before Grad (grad)"]),
    (["--mlir-print-ir-after=decompose"], ["After Decompose (decompose)"]),
    (["--mlir-print-ir-before=grad", "--mlir-print-ir-after=grad"],
     ["Before Grad (grad)", "After Grad (grad)"]),
    (["--mlir-print-ir-after=grad,decompose"],
     ["After Decompose (decompose)", "After Grad (grad)"]),
])
def test_print_ir_before_and_after(thunder_opt, flags, headers):
    """mlir-opt's IR printing flags: the module on stderr under its header, the pass's
    class name and argument, before or after the passes named (or all)."""
    proc = thunder_opt("-p", "decompose,grad{remat=true}", *flags, stdin=REMAT_FN)
    assert proc.returncode == 0, proc.stderr
    assert _dump_headers(proc.stderr) == headers
    dumps = re.split(r"^// -----// IR Dump .+ //----- //\n", proc.stderr, flags=re.M)[1:]
    for header, dump in zip(headers, dumps):
        # before grad: @computation; after it: @forward and @backward
        differentiated = header == "After Grad (grad)"
        assert ("func.func @forward" in dump) == differentiated, (header, dump)
        assert ("func.func @computation" in dump) != differentiated, (header, dump)
    assert proc.stdout.count("func.func @backward") == 1


def test_mlir_timing_report(thunder_opt):
    """--mlir-timing: mlir-opt's report on stderr: the rules, Total Execution Time, one
    line per pass, parser and output, percentages of the total."""
    proc = thunder_opt("-p", "decompose,grad", "--mlir-timing", stdin=REMAT_FN)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0] == lines[2] == "===" + "-" * 73 + "==="
    assert lines[1].strip() == "... Execution time report ..."
    assert re.fullmatch(r"  Total Execution Time: \d+\.\d{4} seconds", lines[3])
    assert lines[5] == "  ----Wall Time----  ----Name----"
    rows = [re.fullmatch(r"  +(\d+\.\d{4}) \( *(\d+\.\d)%\)  (.+)", line) for line in lines[6:]]
    assert all(rows), lines[6:]
    assert [r.group(3) for r in rows] == ["Parser", "Decompose", "Grad", "Output", "Rest",
                                          "Total"]
    assert rows[-1].group(2) == "100.0"
    assert "func.func @backward" in proc.stdout


def _verify(thunder_opt, tmp_path: Path, text: str, *pipeline: str):
    src = tmp_path / "case.mlir"
    src.write_text(text)
    return src, thunder_opt(str(src), *pipeline, "--verify-diagnostics", "--split-input-file")


STUCK_WITH_EXPECTATION = STUCK_COMPOSITE.replace(
    "  %0 = \"thunder.composite\"",
    "  // expected-error @+1 {{no lowering for 'thunder.composite'}}\n  %0 = \"thunder.composite\"")


def test_verify_diagnostics_passes_when_expected(thunder_opt, tmp_path: Path):
    _, proc = _verify(thunder_opt, tmp_path, STUCK_WITH_EXPECTATION, "-p", "lower-to-stablehlo")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


def test_verify_diagnostics_fails_on_an_unexpected_diagnostic(thunder_opt, tmp_path: Path):
    src, proc = _verify(thunder_opt, tmp_path, STUCK_COMPOSITE, "-p", "lower-to-stablehlo")
    assert_clean_error(proc, 1, "--verify-diagnostics",
                       f"{src}:2:8: error: unexpected error: lower-to-stablehlo: no lowering "
                       "for 'thunder.composite'")


def test_verify_diagnostics_fails_on_a_missing_diagnostic(thunder_opt, tmp_path: Path):
    """An expected error nobody produces fails, as does one expected on another line."""
    text = ("// expected-error @+1 {{never produced}}\n" + ADD_FN + "// -----\n" +
            STUCK_WITH_EXPECTATION.replace("@+1", "@+2"))
    src, proc = _verify(thunder_opt, tmp_path, text, "-p", "lower-to-stablehlo")
    assert_clean_error(proc, 1, f'{src}:1:1: error: expected error "never produced" was not '
                                "produced",
                       "unexpected error: lower-to-stablehlo: no lowering",
                       "expected error \"no lowering for 'thunder.composite'\" was not produced")


def test_verify_diagnostics_same_line_and_unknown_location(thunder_opt, tmp_path: Path):
    """``expected-error {{...}}`` on the op's own line; ``@unknown`` for a diagnostic with
    no file location (a module built without one)."""
    same_line = STUCK_EXECUTOR_CALL.replace(
        'executor = "torch",', 'executor = "torch", // expected-error {{no lowering}}\n')
    assert same_line.splitlines()[1].endswith("// expected-error {{no lowering}}")
    _, proc = _verify(thunder_opt, tmp_path, same_line, "-p", "lower-to-stablehlo")
    assert proc.returncode == 0, proc.stderr
    unknown = STUCK_EXECUTOR_CALL.replace(
        f"({T4}) -> {T4}\n", f"({T4}) -> {T4} loc(unknown)\n", 1)
    assert "loc(unknown)" in unknown
    src, proc = _verify(thunder_opt, tmp_path, unknown, "-p", "lower-to-stablehlo")
    assert_clean_error(proc, 1, f"{src}: error: unexpected error: lower-to-stablehlo: no "
                                "lowering for 'thunder.executor_call'")
    _, proc = _verify(thunder_opt, tmp_path,
                      "// expected-error @unknown {{no lowering}}\n" + unknown,
                      "-p", "lower-to-stablehlo")
    assert proc.returncode == 0, proc.stderr


def test_diagnostics_use_the_ops_file_location(thunder_opt, tmp_path: Path):
    """A pass error names the op's own location when it is a file location, even one in
    another file (the Python source of a traced program), in file:line:col form."""
    text = STUCK_COMPOSITE.replace(
        "({T4}) -> {T4}".format(T4=T4) + "\n  return",
        "({T4}) -> {T4} loc(\"model.py\":12:5)\n  return".format(T4=T4))
    assert 'loc("model.py":12:5)' in text
    src = tmp_path / "stuck.mlir"
    src.write_text(text)
    proc = thunder_opt(str(src), "-p", "lower-to-stablehlo")
    assert_clean_error(proc, 1, "\nmodel.py:12:5: error: lower-to-stablehlo: no lowering "
                                "for 'thunder.composite'")


def test_execution_transform_under_thunder_opt(thunder_opt):
    """execution-transform{executors=NAME} resolves NAME in the executor registry; an
    elementwise prim an implementation claims becomes the executor's call. An unknown name
    is a pass failure with a suggestion."""
    import itertools

    from thunder_mlir.extend import OperatorExecutor, register_executor
    import thunder_mlir.torch as ltorch

    name = f"optex{next(itertools.count())}_{id(object())}"
    ex = register_executor(OperatorExecutor(name))
    mm = ex.register_operator("mymul", like=lambda a, b: a * b, fn=lambda a, b: a * b)
    ex.register_implementation(ltorch.mul, execution_transform=lambda a, b: mm(a, b))
    prim_mul = ADD_FN.replace("thunder.add", "thunder.mul").replace("@f(", "@computation(")
    proc = thunder_opt("-p", f"execution-transform{{executors={name}}},decompose,partition",
                       stdin=prim_mul)
    assert proc.returncode == 0, proc.stderr
    assert f'callee = "{name}.mymul", executor = "{name}"' in proc.stdout
    assert '"thunder.mul"' not in proc.stdout
    bad = thunder_opt("-p", f"execution-transform{{executors={name}x}}", stdin=prim_mul)
    assert_clean_error(bad, 1, f"no executor named '{name}x' (did you mean '{name}'?)")


# ------------------------------------------------ every jit stage, from its pipeline
def _gpt2_stages(training: bool):
    os = pytest.importorskip("os")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    transformers = pytest.importorskip("transformers", reason="a test dependency")
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    # the tiny GPT-2 of examples/gpt2_tiny.py and tests/test_models.py
    cfg = transformers.GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000,
                                  bos_token_id=999, eos_token_id=999)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    jm = thunder_mlir.jit(model)
    ids = torch.randint(0, 1000, (1, 16))
    with torch.set_grad_enabled(training):
        jm(ids, use_cache=False)
    return thunder_mlir.last_traces(jm)


@pytest.fixture(scope="module")
def gpt2_training_stages():
    return _gpt2_stages(training=True)


def test_gpt2_every_stage_reproduced_from_initial(thunder_opt, tmp_path: Path,
                                                  gpt2_training_stages):
    """Each stage of last_traces records the pipeline that makes it from the previous
    stage; thunder-opt running the pipelines up to a stage on the ``initial`` text prints
    exactly that stage (debug info and SSA names included)."""
    stages = gpt2_training_stages
    names = [s.name for s in stages]
    assert names == ["initial", "grad", "prims", "plan", "stablehlo", "xla-compile"]
    assert [s.pipeline for s in stages] == [
        None, "builtin.module(grad{remat=true save-materialized=false})",
        "builtin.module(decompose,merge-dots)",
        "builtin.module(partition)", "builtin.module(lower-to-stablehlo{computed-once=true "
        "accumulate-f32=true narrow-dots=false batch-group-taps=true "
        "blocked-contractions=true})", None]
    _reproduce_from_initial(thunder_opt, tmp_path, stages, normalize=lambda text: text)
    assert "modeling_gpt2.py" in stages[-2].text  # the debug info is the model's source


def test_gpt2_stage_reproduced_by_the_console_script(tmp_path: Path, gpt2_training_stages):
    """The ``thunder-opt`` console script (a fresh process: nothing shared with the jit's
    process) reproduces the final stage from the initial one, given the stages'
    pipelines joined."""
    stages = gpt2_training_stages
    src = tmp_path / "initial.mlir"
    src.write_text(stages[0].text)
    pipeline = "builtin.module(" + ",".join(
        s.pipeline[len("builtin.module("):-1] for s in stages if s.pipeline) + ")"
    script = Path(sys.executable).with_name("thunder-opt")
    proc = subprocess.run([str(script), str(src), f"--pass-pipeline={pipeline}",
                           "--mlir-print-debuginfo"], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == stages[-2].text


def test_gpt2_inference_stages_reproduced(thunder_opt, tmp_path: Path):
    """Without grad: initial -> prims -> plan -> stablehlo, each reproduced."""
    stages = _gpt2_stages(training=False)
    assert [s.name for s in stages] == ["initial", "prims", "plan", "stablehlo", "xla-compile"]
    src = tmp_path / "initial.mlir"
    for previous, stage in zip(stages, stages[1:-1]):
        src.write_text(previous.text)
        proc = thunder_opt(str(src), f"--pass-pipeline={stage.pipeline}", "--mlir-print-debuginfo")
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == stage.text, stage.name


@pytest.mark.parametrize("mode", ["grad", "value_and_grad"])
def test_joint_stage_records_its_option(thunder_opt, tmp_path: Path, mode: str):
    """thunder_mlir.grad / value_and_grad: the joint stage's pipeline carries keep-outputs,
    and thunder-opt reproduces it."""
    def f(x, y):
        return (torch.sin(x * y) + x).sum()

    jfn = thunder_mlir.jit(f)
    getattr(thunder_mlir, mode)(jfn)(torch.randn(3), torch.randn(3))
    stages = thunder_mlir.last_traces(jfn)  # the gradient program's
    joint = next(s for s in stages if s.name == "joint")
    keep = "true" if mode == "value_and_grad" else "false"
    assert joint.pipeline == f"builtin.module(joint{{keep-outputs={keep}}})"
    grad_stage = stages[[s.name for s in stages].index("joint") - 1]
    src = tmp_path / "grad.mlir"
    src.write_text(grad_stage.text)
    proc = thunder_opt(str(src), f"--pass-pipeline={joint.pipeline}", "--mlir-print-debuginfo")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == joint.text


# ------------------------------------------- executor calls named by symbol (impl = @...)
def _renumbered(text: str) -> str:
    """``text`` with the process counters of implementation symbols (``@name$12``)
    renumbered in order of first appearance: a symbol thunder-opt registers (a VJP closure)
    gets another counter than jit's, in the same places."""
    seen: dict[str, int] = {}
    return re.sub(r"\$(\d+)", lambda m: f"${seen.setdefault(m[1], len(seen))}", text)


def _reproduce_from_initial(thunder_opt, tmp_path: Path, stages, normalize=None) -> None:
    """thunder-opt running the stages' pipelines (joined up to each stage) on the
    ``initial`` text prints each stage, compared after ``normalize`` (default: symbol
    counters renumbered; the identity for an exact comparison)."""
    normalize = normalize or _renumbered
    src = tmp_path / "initial.mlir"
    src.write_text(stages[0].text)
    elements = []
    for stage in stages[1:-1]:
        elements.append(stage.pipeline[len("builtin.module("):-1])
        proc = thunder_opt(str(src), f"--pass-pipeline=builtin.module({','.join(elements)})",
                           "--mlir-print-debuginfo")
        assert proc.returncode == 0, proc.stderr
        assert normalize(proc.stdout) == normalize(stage.text), stage.name


def _fallback_program(a, b):
    c = torch.softmax(a * b, -1)
    # a call of a conftest function (a closure: the registry names it, @...$n) and a
    # public torch function with plain arguments (rebuilt from the IR: thunder.torch_call)
    return (unregistered_cumprod(c, 0) * torch.polygamma(1, c + 1)).sum()


def test_grad_of_fallback_calls_reproduced_from_initial(thunder_opt, tmp_path: Path):
    """Every stage of a program differentiating torch fallback calls, grad included (the
    VJPs re-run the calls' implementations, found by symbol), is reproduced by thunder-opt
    from the ``initial`` text in the jit's process."""
    assert torch.polygamma not in SYMBOLS  # (else pick another op without a symbol)
    jfn = thunder_mlir.jit(_fallback_program)
    a, b = torch.randn(3, 4, requires_grad=True), torch.randn(3, 4)
    jfn(a, b).backward()
    a2 = a.detach().clone().requires_grad_()
    _fallback_program(a2, b).backward()
    torch.testing.assert_close(a.grad, a2.grad)
    stages = thunder_mlir.last_traces(jfn)
    assert [s.name for s in stages] == ["initial", "grad", "prims", "plan", "stablehlo",
                                        "xla-compile"]
    initial = stages[0].text
    assert re.search(r'impl = @conftest\.unregistered_cumprod\$\d+,', initial), initial
    assert 'impl = @torch.polygamma, ' in initial and 'thunder.torch_call = "(1, t0)"' in initial
    grad = stages[1].text
    assert 'callee = "conftest.unregistered_cumprod.vjp"' in grad
    assert 'callee = "torch.polygamma.vjp"' in grad
    _reproduce_from_initial(thunder_opt, tmp_path, stages)


def test_execution_transform_of_operators_reproduced_from_initial(thunder_opt,
                                                                  tmp_path: Path):
    """A user executor's operator (its call record, ``thunder.call = @...``, and its
    runner, ``impl = @...``, found by symbol) is claimed by execution-transform under
    thunder-opt as under jit: every stage reproduced from ``initial``."""
    from thunder_mlir.extend import OperatorExecutor, register_executor

    name = f"symex_{id(object())}"
    ex = register_executor(OperatorExecutor(name))
    scaled = ex.register_operator("scaled", like=lambda a, s: a * s,
                                  fn=lambda a, s: a * s + 0)

    def program(a):
        return scaled(unregistered_cumprod(a, 1), 3.0).exp()

    jfn = thunder_mlir.jit(program, executors=[ex])
    a = torch.randn(2, 3)
    torch.testing.assert_close(jfn(a), (torch.cumprod(a, 1) * 3.0).exp())
    stages = thunder_mlir.last_traces(jfn)
    assert [s.name for s in stages] == ["initial", "execution", "prims", "plan", "stablehlo",
                                        "xla-compile"]
    assert re.search(rf'thunder\.call = @{name}\.scaled\.call\$\d+', stages[0].text)
    assert re.search(rf'callee = "{name}.scaled", executor = "{name}", '
                     rf'impl = @{name}\.scaled\$\d+,', stages[1].text), stages[1].text
    _reproduce_from_initial(thunder_opt, tmp_path, stages)


def _plain_program(x):
    # torch functions without symbols, all arguments plain values (ints, a dtype, kwargs)
    y = torch.polygamma(2, x.sin() + 2)
    v, i = torch.mode(x, dim=1, keepdim=True)
    return y * 2 + torch.special.i0e(x).to(dtype=torch.float64).float(), v, i


def test_plain_fallback_calls_rebuilt_by_a_fresh_process(tmp_path: Path):
    """A fallback call whose arguments are plain values is rebuilt from the IR alone: the
    ``thunder-opt`` console script (a fresh process) reproduces every stage from
    ``initial``, and a fresh interpreter runs the final module's plan to eager's
    result."""
    assert all(f not in SYMBOLS for f in (torch.polygamma, torch.mode, torch.special.i0e))
    jfn = thunder_mlir.jit(_plain_program)
    x = torch.randn(3, 4)
    torch.testing.assert_close(jfn(x), _plain_program(x))
    stages = thunder_mlir.last_traces(jfn)
    assert [s.name for s in stages] == ["initial", "prims", "plan", "stablehlo", "xla-compile"]
    initial = stages[0].text
    assert "$" not in initial  # no symbol of this process's registry
    assert 'thunder.torch_call = "(2, t0)"' in initial
    assert 'impl = @torch.mode, ' in initial
    assert 'thunder.torch_call = "(t0, dim=1, keepdim=True)"' in initial
    src = tmp_path / "initial.mlir"
    src.write_text(initial)
    script = Path(sys.executable).with_name("thunder-opt")
    pipeline = "builtin.module(" + ",".join(
        s.pipeline[len("builtin.module("):-1] for s in stages if s.pipeline) + ")"
    proc = subprocess.run([str(script), str(src), f"--pass-pipeline={pipeline}",
                           "--mlir-print-debuginfo", "-o", str(tmp_path / "final.mlir")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "final.mlir").read_text() == stages[-2].text
    torch.save(x, tmp_path / "x.pt")
    run = subprocess.run([sys.executable, "-c", f"""
import torch
from thunder_mlir.ir.context import get_context
from thunder_mlir.runtime.plan import build_plan
from torch_mlir import ir
with get_context():
    module = ir.Module.parse(open({str(tmp_path / 'final.mlir')!r}).read())
plan, _ = build_plan(module, torch.device("cpu"))
torch.save(plan.run([torch.load({str(tmp_path / 'x.pt')!r})]), {str(tmp_path / 'out.pt')!r})
"""], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    torch.testing.assert_close(tuple(torch.load(tmp_path / "out.pt")), _plain_program(x))


def test_plain_fallback_grad_in_a_fresh_process(tmp_path: Path):
    """grad of a plainly-encoded fallback call in a fresh thunder-opt process: the VJP is
    built from the call rebuilt from the IR (the jit's grad stage, counters renumbered)."""
    jfn = thunder_mlir.jit(lambda x: torch.polygamma(1, x + 2).sum())
    jfn(torch.randn(5, requires_grad=True)).backward()
    stages = thunder_mlir.last_traces(jfn)
    assert stages[1].name == "grad" and "$" not in stages[0].text
    src = tmp_path / "initial.mlir"
    src.write_text(stages[0].text)
    proc = thunder_opt_process(str(src), f"--pass-pipeline={stages[1].pipeline}",
                               "--mlir-print-debuginfo")
    assert proc.returncode == 0, proc.stderr
    assert _renumbered(proc.stdout) == _renumbered(stages[1].text)


def test_missing_implementation_is_a_clear_error(thunder_opt, tmp_path: Path):
    """A symbol this process does not hold (registered by the process that traced the
    program): thunder-opt names it and says why, at the op's source location; in a fresh
    process too."""
    jfn = thunder_mlir.jit(_fallback_program)
    jfn(torch.randn(3, 4, requires_grad=True), torch.randn(3, 4))
    initial = thunder_mlir.last_traces(jfn)[0].text
    src = tmp_path / "initial.mlir"
    src.write_text(re.sub(r"unregistered_cumprod\$\d+", "unregistered_cumprod$999999999",
                          initial))
    why = ("the implementation @conftest.unregistered_cumprod$999999999 is not in this "
           "process's registry: it was registered by the process that traced this program")
    for proc in (thunder_opt(str(src), "-p", "grad"),
                 thunder_opt_process(str(src), "-p", "grad")):
        assert_clean_error(proc, 1, why, "re-run from the same process",
                           "conftest.py:")  # the op's location: the call in conftest
    # a fresh process does not hold the jit's symbols at all
    src.write_text(initial)
    assert_clean_error(thunder_opt_process(str(src), "-p", "grad"), 1,
                       "@conftest.unregistered_cumprod$", "registered by the process")


def test_reads_a_serialized_artifact(thunder_opt, tmp_path: Path):
    """A file of ``thunder_mlir.export``'s serialization (jax.export's flatbuffer, not
    text) is read as its StableHLO module, through which passes run as on a ``.mlir``
    file; bytes that are neither are a clean error."""
    from torch.export import Dim

    exp = thunder_mlir.export(lambda x: torch.tanh(x) * 2, torch.randn(3, 4),
                              dynamic_shapes={"x": {0: Dim("batch")}})
    path = tmp_path / "tanh.bin"
    path.write_bytes(exp.serialize())
    proc = thunder_opt(str(path))
    assert proc.returncode == 0, proc.stderr
    assert "func.func public @main(%arg0: tensor<?x4xf32>" in proc.stdout
    assert "stablehlo.tanh" in proc.stdout and "thunder.export" in proc.stdout
    # the artifact's module is MLIR a pipeline runs on (here: canonicalize)
    proc = thunder_opt(str(path), "-p", "canonicalize")
    assert proc.returncode == 0 and "stablehlo.tanh" in proc.stdout, proc.stderr
    junk = tmp_path / "junk.bin"
    junk.write_bytes(bytes(range(256)) * 4)
    assert_clean_error(thunder_opt(str(junk)), 1, "neither MLIR text nor a serialized")
