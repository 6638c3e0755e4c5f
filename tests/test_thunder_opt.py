"""Tests of ``thunder-opt``: the FileCheck files' RUN lines, error reporting, and that every
stage ``jit`` shows in ``last_traces`` is reproduced by ``thunder-opt -p <pass>``.

The ``.mlir`` files under ``tests/passes`` and ``tests/dialect`` are run lit-style: each
``// RUN:`` line is a pipeline of ``thunder-opt`` and ``filecheck`` commands (``%s`` is the
file; ``not CMD`` expects failure; ``2>&1`` merges stderr). Commands run as
``sys.executable -m ...``, so the tests do not depend on PATH.
"""

from __future__ import annotations

import io
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch_mlir import ir

import thunder_mlir
from conftest import unregistered_cumprod
from thunder_mlir.ir.context import get_context
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


def run_pipeline(command: str, path: Path) -> tuple[bool, str]:
    """Run one RUN line; returns (success, a report of what each command printed)."""
    data, report = "", []
    for stage in command.replace("%s", shlex.quote(str(path))).split("|"):
        words = shlex.split(stage)
        expect_failure = words[0] == "not"
        words = words[1:] if expect_failure else words
        merge_stderr = "2>&1" in words
        words = [w for w in words if w != "2>&1"]
        if words[0] not in TOOLS:
            raise ValueError(f"{path.name}: unknown command '{words[0]}' in RUN line")
        proc = subprocess.run(TOOLS[words[0]] + words[1:], input=data, capture_output=True,
                              text=True, timeout=300)
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
def thunder_opt(capsys, monkeypatch):
    """Run thunder-opt's ``main`` in this process (no interpreter start-up per call)."""
    def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
        capsys.readouterr()
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        try:
            code = thunder_opt_main(list(args))
        except SystemExit as e:  # argparse's usage errors
            code = e.code
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(["thunder-opt", *args], code, out, err)
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
    assert_clean_error(proc, 1, f'"{src}"{line_col}', message)


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
    assert_clean_error(proc, 1, f'"{src}":2:8: error: ', message)
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
    monkeypatch.setattr(tool, "build_pipeline", lambda text: [tool.Stage("corrupt", corrupt)])
    proc = thunder_opt(str(src), "-p", "corrupt")
    assert_clean_error(proc, 1, "invalid IR after pass 'corrupt'",
                       "'thunder.add' op result type tensor<2xf64> differs from the inferred "
                       "tensor<2xf32>")


def test_invalid_ir_on_stdin(thunder_opt):
    """A verifier error (not a syntax error), read from stdin."""
    proc = thunder_opt("-", stdin=ADD_FN.replace("-> tensor<2xf32> {", "-> tensor<3xf32> {"))
    assert_clean_error(proc, 1, '"<stdin>":3:3:', "doesn't match function result type")


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
      impl = 0 : i64, {ONE_RUN}, {RESULTS_ONE_RUN}}} : ({T4}) -> {T4}
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
    assert_clean_error(proc, 1, "pass 'lower-to-stablehlo' failed", f"no lowering for '{op}'",
                       f'"{src}":2:8')


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
    headers = re.findall(r"^// -----// IR Dump After (\S+) //----- //$", proc.stderr, re.M)
    assert headers == ["decompose", "cse"]
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
    assert_clean_error(thunder_opt_process(str(src)), 1, f'"{src}":2:8:',
                       "expects exactly 2 operands")
