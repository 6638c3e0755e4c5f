"""Every prim is complete: its ``PrimDef`` (``thunder_mlir/ir/prim_defs.py``) has a lowering
and a VJP rule or an explicit no-grad reason, and the tests cover it with a round-trip case
(``tests/dialect/roundtrip.mlir``) and a lowering FileCheck case
(``tests/passes/lower_to_stablehlo*.mlir``). The views generated from the definitions (op
classes, builders' table, ``grad.CHEAP``) agree with them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from torch_mlir import ir

from thunder_mlir.ir.context import get_context
from thunder_mlir.ir.dialect import Thunder
from thunder_mlir.ir.prim_defs import BINARY_PRIMS, CHEAP, PRIMS, UNARY_PRIMS
from thunder_mlir.ir.primdef import PRIM_OPS, TorchAutogradVJP, verify_prim_ops

TESTS = Path(__file__).parent
ROUNDTRIP = TESTS / "dialect" / "roundtrip.mlir"
LOWERING_FILES = sorted((TESTS / "passes").glob("lower_to_stablehlo*.mlir"))


def prims_used(text: str) -> set[str]:
    """The prims an .mlir text uses in its code (``thunder.<name>`` outside comments)."""
    code = "\n".join(line.split("//", 1)[0] for line in text.splitlines())
    return {n for n in re.findall(r"\bthunder\.(\w+)", code) if n in PRIMS}


def prims_checked(text: str) -> set[str]:
    """The prims named in the ``// CHECK`` lines of an .mlir text."""
    checks = "\n".join(line for line in text.splitlines() if line.startswith("// CHECK"))
    return {n for n in re.findall(r"\bthunder\.(\w+)", checks) if n in PRIMS}


def test_prims_exist():
    assert len(PRIMS) >= 100 and {"add", "dot_general", "scatter", "rng_bits"} <= set(PRIMS)


@pytest.mark.parametrize("name", sorted(PRIMS))
def test_lowering(name):
    """A StableHLO/CHLO op name (1:1 lowering) or a pattern function."""
    p = PRIMS[name]
    if isinstance(p.lower, str):
        assert re.fullmatch(r"(stablehlo|chlo)\.\w+", p.lower), p.lower
    else:
        assert callable(p.lower), p.lower


@pytest.mark.parametrize("name", sorted(PRIMS))
def test_vjp_or_no_grad_reason(name):
    """Exactly one of a VJP rule and a no-grad reason (a phrase saying why)."""
    p = PRIMS[name]
    assert (p.vjp is None) != (p.no_grad is None), name
    if p.vjp is not None:
        assert callable(p.vjp) or isinstance(p.vjp, TorchAutogradVJP), p.vjp
    else:
        assert len(p.no_grad.split()) >= 2, f"{name}: no_grad reason {p.no_grad!r}"


def test_roundtrip_case_for_every_prim():
    text = ROUNDTRIP.read_text()
    assert not set(PRIMS) - prims_used(text), "prims missing from roundtrip.mlir"
    assert not set(PRIMS) - prims_checked(text), "prims without a CHECK in roundtrip.mlir"


def test_lowering_case_for_every_prim():
    """Each prim is lowered in a lower_to_stablehlo*.mlir file whose RUN line runs the pass
    (its CHECK lines pin the StableHLO ops, tests/test_thunder_opt.py runs them)."""
    used: set[str] = set()
    for path in LOWERING_FILES:
        text = path.read_text()
        assert re.search(r"^// RUN: .*lower-to-stablehlo.*\| filecheck", text, re.M), path
        assert "// CHECK" in text, path
        used |= prims_used(text)
    missing = sorted(set(PRIMS) - used)
    assert not missing, f"prims without a lowering FileCheck case: {missing}"


def test_the_coverage_check_can_fail():
    """``prims_used`` ignores comments and unknown names: a prim only mentioned in a comment
    or a CHECK line is not a case."""
    text = ('// CHECK: "thunder.exp"\n'
            '%0 = "thunder.add"(%a, %a) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>\n'
            '%1 = "thunder.not_a_prim"(%a) : (tensor<2xf32>) -> tensor<2xf32>  // thunder.neg\n')
    assert prims_used(text) == {"add"}
    assert prims_checked(text) == {"exp"}


def test_inference_accepts_the_test_files():
    """Every prim op in the round-trip and lowering files verifies against its PrimDef
    inference (the files hold valid IR; a too strict rule would reject them)."""
    ctx = get_context()
    for path in [ROUNDTRIP, *LOWERING_FILES]:
        with ctx:
            module = ir.Module.parse(path.read_text())
            assert verify_prim_ops(module.operation) == [], path


def test_generated_views_agree():
    """The op classes are generated from and registered for exactly the PrimDefs."""
    assert set(PRIM_OPS) == set(PRIMS)
    registered = {op.OPERATION_NAME for op in Thunder.operations}
    for name, p in PRIMS.items():
        assert PRIM_OPS[name] is p.op and p.op.OPERATION_NAME == f"thunder.{name}"
        assert p.op.OPERATION_NAME in registered
    assert set(UNARY_PRIMS) | set(BINARY_PRIMS) == {n for n, p in PRIMS.items()
                                                   if p.elementwise}
    assert all(len(PRIMS[n].operands) == 1 for n in UNARY_PRIMS)
    assert all(len(PRIMS[n].operands) == 2 for n in BINARY_PRIMS)
    assert CHEAP == {n for n, p in PRIMS.items() if p.cheap}


def test_grad_reads_the_definitions():
    """grad's rematerialization set is the PrimDefs' ``cheap`` flags."""
    from thunder_mlir.transforms import grad

    assert grad.CHEAP is CHEAP
