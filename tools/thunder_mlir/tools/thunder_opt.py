"""``thunder-opt``: run thunder_mlir passes on an ``.mlir`` file, like ``mlir-opt``.

    thunder-opt FILE.mlir -p decompose,partition,lower-to-stablehlo [-o OUT]
    thunder-opt - -p canonicalize,cse < in.mlir          # '-' (the default) reads stdin
    thunder-opt in.mlir -p decompose --print-ir-after-all --dump-dir dumps/

The file is parsed in a context with the thunder dialect loaded, each pipeline element runs
in order and the module is verified after it, and the result is printed. A pipeline element
is either a pass of the shared registry (``thunder_mlir.transforms.registry.PASSES``, the same objects
``jit`` runs, so every stage of ``last_traces`` can be reproduced here) or an upstream MLIR
pipeline element that ``PassManager`` parses (``canonicalize``, ``cse``, ``func.func(cse)``,
``stablehlo-refine-shapes``, ...). Python passes cannot be named inside an MLIR pipeline
string (toolchain.md §2), so the mapping happens here, one element at a time.

Verifying a module (after parsing it too) runs MLIR's verifier, then checks each prim op's
operand and result types against its ``PrimDef`` inference (``primdef.verify_prim_ops``):
``thunder.add(tensor<2xf32>, tensor<3xf32>)`` is invalid IR.

``--split-input-file`` treats chunks separated by ``// -----`` lines as separate modules,
keeping their line numbers, so one test file can hold several cases that need the same
function name (``partition`` works on ``@computation``).

Exit status: 0 on success, 1 for bad input (unreadable file, invalid IR, a failing pass),
2 for usage errors (bad flags, unknown pass names). Errors are one short message with the
MLIR diagnostic (``"file.mlir":line:col: ...``), never a Python traceback unless
``--traceback`` is given.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from torch_mlir import ir
from torch_mlir.passmanager import PassManager

from thunder_mlir.ir.context import get_context
from thunder_mlir.ir.primdef import verify_prim_ops
from thunder_mlir.errors import ThunderError
from thunder_mlir.transforms.registry import PASSES

PROG = "thunder-opt"
SPLIT_MARKER = "// -----"


class OptError(Exception):
    """A failure reported to the user as ``thunder-opt: error: ...`` with an exit code."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Stage:
    """One pipeline element: its name as written and how to run it on a module."""

    name: str
    run: Callable[[ir.Module], None]


# ------------------------------------------------------------------ pipeline
def split_pipeline(text: str) -> list[str]:
    """Split ``a,b(c,d),e{x=1,y=2}`` at top-level commas into its elements."""
    elements, depth, current = [], 0, ""
    for ch in text:
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
        if ch == "," and depth == 0:
            elements.append(current.strip())
            current = ""
        else:
            current += ch
    elements.append(current.strip())
    if any(not e for e in elements):
        raise OptError(f"empty element in pass pipeline '{text}'", code=2)
    return elements


def _upstream_stage(element: str) -> Stage:
    """A stage running one upstream MLIR pipeline element (parsed now, to fail early)."""
    _register_upstream_passes()
    pipeline = f"builtin.module({element})"
    try:
        pm = PassManager.parse(pipeline)
    except ValueError as e:  # the binding raises ValueError with the parser's message
        detail = str(e).split("error:", 1)[-1].strip().splitlines()[0]
        raise OptError(f"unknown pass '{element}': not a thunder pass "
                       f"({', '.join(PASSES)}) and not an MLIR pass ({detail}); "
                       f"see {PROG} --list-passes", code=2) from None

    def run(module: ir.Module) -> None:
        pm.run(module.operation)
    return Stage(element, run)


@functools.cache
def _register_upstream_passes() -> None:
    # StableHLO's passes (stablehlo-refine-shapes, ...) are not registered by default.
    from torch_mlir._mlir_libs import _stablehlo

    _stablehlo.register_stablehlo_passes()


def build_pipeline(text: str | None) -> list[Stage]:
    """The stages of a ``-p`` string: registry passes by name, anything else upstream MLIR."""
    if not text:
        return []
    return [Stage(e, PASSES[e].run) if e in PASSES else _upstream_stage(e)
            for e in split_pipeline(text)]


# ----------------------------------------------------------------- parse/print
def read_source(path: str) -> tuple[str, str]:
    """(text, source name) of ``path``; ``-`` is stdin."""
    if path == "-":
        return sys.stdin.read(), "<stdin>"
    try:
        return Path(path).read_text(), path
    except OSError as e:
        raise OptError(f"cannot read '{path}': {e.strerror}") from None


def split_source(text: str, split: bool) -> list[str]:
    """Chunks of ``text`` (split at ``// -----`` lines when ``split``), each padded with
    blank lines so that diagnostics keep the line numbers of the whole file."""
    if not split:
        return [text]
    chunks, line = [], 0
    for chunk in re.split(rf"^{re.escape(SPLIT_MARKER)}[^\n]*\n?", text, flags=re.M):
        chunks.append("\n" * line + chunk)
        line += chunk.count("\n") + 1
    return chunks


def parse_module(text: str, source_name: str) -> ir.Module:
    """Parse ``text`` into a module (top-level ops are wrapped in an implicit one, as
    mlir-opt does); locations and diagnostics name ``source_name``. Raises OptError."""
    try:
        try:
            parsed = ir.Operation.parse(text, source_name=source_name)
        except ir.MLIRError as e:
            if "single top-level operation" not in str(e):
                raise
            # Several top-level ops: wrap them. "module {" goes on line 1 so that line
            # numbers stay right (columns of line 1 shift by 8).
            parsed = ir.Operation.parse("module {" + text + "\n}", source_name=source_name)
    except ir.MLIRError as e:
        raise OptError(f"cannot parse '{source_name}':\n{_diagnostics(e)}") from None
    op = parsed.operation
    module = ir.Module.create(loc=op.location)
    if op.name == "builtin.module":  # move the body and attributes (sym_name) over
        for name in list(op.attributes):  # iterating an attribute map gives the names
            module.operation.attributes[name] = op.attributes[name]
        for child in list(op.regions[0].blocks[0].operations):
            module.body.append(child)
    else:
        module.body.append(op)
    _verify_prims(module, f"invalid IR in '{source_name}'")
    return module


def _verify_prims(module: ir.Module, what: str) -> None:
    """MLIR's verifier checks the ops' fields; each prim's ``PrimDef.infer`` checks its
    operand and result types (``verify_prim_ops``). Raises OptError with the diagnostics."""
    errors = verify_prim_ops(module.operation)
    if errors:
        raise OptError(f"{what}:\n" + "\n".join(errors))


def _diagnostics(e: ir.MLIRError) -> str:
    """The MLIR diagnostics of ``e``, one per line (``error: "f.mlir":3:5: ...``)."""
    lines = str(e).splitlines()
    return "\n".join(line for line in lines[1:] if line.strip()) or str(e)


def print_modules(modules: list[ir.Module], debuginfo: bool) -> str:
    """The modules' text, separated by ``// -----`` lines when there are several."""
    texts = [m.operation.get_asm(enable_debug_info=debuginfo) for m in modules]
    return f"{SPLIT_MARKER}\n".join(texts)


# ----------------------------------------------------------------------- run
def run_stage(stage: Stage, module: ir.Module) -> None:
    """Run one stage on ``module`` and verify the result; failures become OptError."""
    try:
        with module.context, ir.Location.unknown():
            stage.run(module)
    except ir.MLIRError as e:
        raise OptError(f"pass '{stage.name}' failed:\n{_diagnostics(e)}") from None
    except (ThunderError, NotImplementedError) as e:  # e.g. LoweringError naming the op
        raise OptError(f"pass '{stage.name}' failed: {e}") from None
    try:
        module.operation.verify()
    except ir.MLIRError as e:
        raise OptError(f"invalid IR after pass '{stage.name}':\n{_diagnostics(e)}") from None
    _verify_prims(module, f"invalid IR after pass '{stage.name}'")


def _sanitize(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")


def optimize(args: argparse.Namespace) -> str:
    """Parse, run the pipeline (with dumps), and return the printed result."""
    with get_context():
        stages = build_pipeline(args.passes)  # usage errors before reading any input
        text, source_name = read_source(args.input)
        modules = [parse_module(chunk, source_name)
                   for chunk in split_source(text, args.split_input_file)]
        if args.dump_dir:
            Path(args.dump_dir).mkdir(parents=True, exist_ok=True)
        for index, stage in enumerate(stages):
            for module in modules:
                run_stage(stage, module)
            if args.print_ir_after_all or args.dump_dir:
                dump = print_modules(modules, args.mlir_print_debuginfo)
            if args.print_ir_after_all:
                sys.stderr.write(f"// -----// IR Dump After {stage.name} //----- //\n{dump}\n")
                sys.stderr.flush()
            if args.dump_dir:
                out = Path(args.dump_dir) / f"{index}_{_sanitize(stage.name)}.mlir"
                out.write_text(dump)
        return print_modules(modules, args.mlir_print_debuginfo)


def list_passes() -> str:
    """The registry as ``name  summary`` lines, plus a note on upstream passes."""
    width = max(len(n) for n in PASSES)
    lines = [f"  {p.name:<{width}}  {p.summary}" for p in PASSES.values()]
    return ("thunder passes (thunder_mlir.transforms.registry.PASSES):\n" + "\n".join(lines) +
            "\nAny other element is passed to MLIR's PassManager "
            "(e.g. canonicalize, cse, symbol-dce, func.func(cse)).\n")


def make_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    summary = __doc__.split("\n\n")[0].replace("``", "")
    p = argparse.ArgumentParser(prog=PROG, description=summary,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", nargs="?", default="-", help="input .mlir file ('-': stdin)")
    p.add_argument("-p", "--passes", metavar="PIPELINE",
                   help="comma-separated passes, e.g. decompose,partition,lower-to-stablehlo")
    p.add_argument("-o", "--output", metavar="OUT", default="-", help="output file ('-': stdout)")
    p.add_argument("--print-ir-after-all", action="store_true",
                   help="print the module to stderr after each pass")
    p.add_argument("--dump-dir", metavar="DIR",
                   help="write DIR/<index>_<pass>.mlir after each pass")
    p.add_argument("--mlir-print-debuginfo", action="store_true",
                   help="print locations (loc(...)) in all output")
    p.add_argument("--split-input-file", action="store_true",
                   help="process chunks separated by '// -----' as separate modules")
    p.add_argument("--list-passes", action="store_true", help="list the thunder passes and exit")
    p.add_argument("--traceback", action="store_true",
                   help="show Python tracebacks of internal errors (for debugging passes)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``thunder-opt`` console script; returns the exit status."""
    args = make_parser().parse_args(argv)  # exits with 2 on usage errors
    if args.list_passes:
        sys.stdout.write(list_passes())
        return 0
    try:
        result = optimize(args)
        if args.output == "-":
            sys.stdout.write(result)
        else:
            Path(args.output).write_text(result)
    except OptError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return e.code
    except OSError as e:  # writing -o or --dump-dir files
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # a bug in a pass: say which, keep the traceback opt-in
        if args.traceback:
            traceback.print_exc()
        else:
            print(f"{PROG}: internal error: {type(e).__name__}: {e} "
                  f"(rerun with --traceback for details)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
