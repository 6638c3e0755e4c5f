"""``thunder-opt``: run thunder_mlir passes on an ``.mlir`` file, like ``mlir-opt``.

    thunder-opt FILE.mlir --pass-pipeline='builtin.module(decompose,grad{remat=true})'
    thunder-opt FILE.mlir -p decompose,partition,lower-to-stablehlo [-o OUT]
    thunder-opt - -p canonicalize,cse < in.mlir          # '-' (the default) reads stdin
    thunder-opt in.mlir -p decompose --mlir-print-ir-after-all --dump-dir dumps/
    thunder-opt bad.mlir -p grad --verify-diagnostics --split-input-file
    thunder-opt in.mlir -p decompose,partition --mlir-timing
    thunder-opt model.bin -p stablehlo-refine-shapes   # a serialized artifact (export)

The file is parsed in a context with the thunder dialect loaded, each pipeline element runs
in order and the module is verified after it, and the result is printed. A pipeline
(``--pass-pipeline``, or ``-p``: the same text, ``builtin.module(...)`` optional) is parsed
by the shared registry (``thunder_mlir.transforms.registry``): each element is a pass value
of the registry (``grad{remat=false}``, the objects ``jit`` runs; every stage of
``last_traces`` records the pipeline that reproduces it here) or an upstream MLIR pipeline
element that ``PassManager`` parses (``canonicalize``, ``cse``, ``func.func(cse)``,
``stablehlo-refine-shapes``, ...). Python passes cannot be named inside an MLIR pipeline
string (toolchain.md §2), so the mapping happens here, one element at a time.

Verifying a module (after parsing it and after every pass) runs MLIR's verifier, then checks
each prim op's operand and result types against its ``PrimDef`` inference
(``primdef.verify_prim_ops``): ``thunder.add(tensor<2xf32>, tensor<3xf32>)`` is invalid IR.

mlir-opt's flags (``mlir/lib/Tools/mlir-opt/MlirOptMain.cpp``, ``mlir/lib/Pass/IRPrinting.cpp``,
``mlir/lib/Support/Timing.cpp``):

* ``--mlir-print-ir-before=P``/``--mlir-print-ir-after=P`` (a pass name, repeatable or
  comma-separated), ``--mlir-print-ir-before-all``/``--mlir-print-ir-after-all``: the
  module to stderr under ``// -----// IR Dump After Grad (grad) //----- //`` headers;
* ``--verify-diagnostics``: the file's ``// expected-error {{text}}`` comments (on the
  line of the op; ``@+N``/``@-N``/``@above``/``@below`` for another line, ``@unknown``
  for a diagnostic with no location) must each match a produced diagnostic (same line,
  message containing the text), and every produced diagnostic must be expected; exit 0
  exactly then;
* ``--mlir-timing``: a wall-time report per pass to stderr;
* ``--split-input-file``: chunks separated by ``// -----`` lines are separate modules,
  keeping their line numbers, so one test file can hold several cases that need the same
  function name (``partition`` works on ``@computation``).

Diagnostics read ``FILE:LINE:COL: error: MESSAGE``: the op's location where it is a file
location (``loc("f.mlir":3:5)``), else the input file with no line. Exit status: 0 on
success, 1 for bad input (unreadable file, invalid IR, a failing pass, unmet expected
diagnostics), 2 for usage errors (bad flags, unknown pass names or options, with a "did
you mean"). Never a Python traceback unless ``--traceback`` is given.
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from torch_mlir import ir
from torch_mlir.passmanager import PassManager

from thunder_mlir.errors import PipelineError, ThunderError
from thunder_mlir.distributed import fused  # noqa: F401 (registers split-fused-projections)
from thunder_mlir.executors import execution_transform  # noqa: F401 (registers the pass)
from thunder_mlir.ir import implementations
from thunder_mlir.ir.context import get_context
from thunder_mlir.ir.primdef import verify_prim_ops
from thunder_mlir.transforms.registry import PASSES, did_you_mean, parse_element, \
    split_top_level, strip_anchor

PROG = "thunder-opt"
SPLIT_MARKER = "// -----"
# upstream passes named in "did you mean" suggestions besides the registry's
UPSTREAM_NAMES = ("canonicalize", "cse", "symbol-dce", "inline", "sccp",
                  "stablehlo-refine-shapes", "stablehlo-aggressive-simplification")


@dataclass(frozen=True)
class Diagnostic:
    """One diagnostic: ``file``, ``line``, ``col`` (None: no file location), ``message``."""

    message: str
    file: str | None = None
    line: int | None = None
    col: int | None = None
    severity: str = "error"

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.col}: " if self.line is not None else \
            (f"{self.file}: " if self.file else "")
        return f"{where}{self.severity}: {self.message}"


class OptError(Exception):
    """A failure reported to the user as ``thunder-opt: error: ...`` with an exit code and
    the MLIR diagnostics behind it."""

    def __init__(self, message: str, code: int = 1, diagnostics: list[Diagnostic] = ()):
        super().__init__(message)
        self.code = code
        self.diagnostics = list(diagnostics)

    def report(self) -> str:
        lines = [f"{PROG}: error: {self}"] + [str(d) for d in self.diagnostics]
        return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Stage:
    """One pipeline element: ``argument`` (its text, ``grad{remat=true}``), ``title``
    (the pass's class name for a registry pass, as mlir-opt's IR dumps name passes),
    ``pass_name`` (what ``--mlir-print-ir-before=`` matches) and how to run it."""

    argument: str
    title: str
    pass_name: str
    run: Callable[[ir.Module], None] = field(compare=False)


# ------------------------------------------------------------------ pipeline
def split_pipeline(text: str) -> list[str]:
    """The elements of a pipeline (``builtin.module(a,b(c,d),e{x=1 y=2})`` or the short
    form ``a,b(c,d),e{x=1 y=2}``), split at top-level commas."""
    body = strip_anchor(text)
    elements = split_top_level(body) if body else []
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
        name = re.split(r"[{(]", element, maxsplit=1)[0].strip()
        raise OptError(f"unknown pass '{element}'"
                       f"{did_you_mean(name, list(PASSES) + list(UPSTREAM_NAMES))}: "
                       f"not a thunder pass ({', '.join(PASSES)}) and not an MLIR pass "
                       f"({detail}); see {PROG} --list-passes", code=2) from None

    def run(module: ir.Module) -> None:
        pm.run(module.operation)
    name = re.split(r"[{(]", element, maxsplit=1)[0].strip()
    return Stage(element, element, name, run)


@functools.cache
def _register_upstream_passes() -> None:
    # StableHLO's passes (stablehlo-refine-shapes, ...) are not registered by default.
    from torch_mlir._mlir_libs import _stablehlo

    _stablehlo.register_stablehlo_passes()


def build_pipeline(text: str | None) -> list[Stage]:
    """The stages of a pipeline string: registry passes by name (with their options),
    anything else upstream MLIR. Raises OptError (code 2) for unknown names or options."""
    if not text:
        return []
    stages = []
    for element in split_pipeline(text):
        name = re.split(r"[{(]", element, maxsplit=1)[0].strip()
        if name not in PASSES:
            stages.append(_upstream_stage(element))
            continue
        try:
            value = parse_element(element)
        except PipelineError as e:
            raise OptError(str(e), code=2) from None
        stages.append(Stage(value.pipeline_element(), type(value).__name__, value.name,
                            value))
    return stages


# ----------------------------------------------------------------- parse/print
def read_source(path: str) -> tuple[str, str]:
    """(text, source name) of ``path``; ``-`` is stdin. A file that is not UTF-8 text
    (``.mlir``) is read as a serialized artifact (``thunder_mlir.export``'s, or any
    ``jax.export`` one: ``read_artifact``)."""
    if path == "-":
        return sys.stdin.read(), "<stdin>"
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise OptError(f"cannot read '{path}': {e.strerror}") from None
    try:
        if b"\0" not in data:
            return data.decode("utf-8"), path
    except UnicodeDecodeError:
        pass
    return read_artifact(data, path), path


def read_artifact(data: bytes, path: str) -> str:
    """The StableHLO text of a serialized artifact (jax.export's flatbuffer, which has no
    magic bytes: recognized by deserializing it, ``thunder_mlir.deserialize`` first, then
    ``jax.export.deserialize``). Raises OptError for bytes that are neither."""
    from thunder_mlir.errors import ExportError
    from thunder_mlir.exported import deserialize

    try:
        return deserialize(data).mlir_module()
    except ExportError:  # a jax.export artifact thunder_mlir did not write
        import jax.export

        return jax.export.deserialize(bytearray(data)).mlir_module()
    except Exception as e:  # noqa: BLE001 - flatbuffers' errors for other bytes vary
        raise OptError(f"cannot read '{path}': neither MLIR text nor a serialized artifact "
                       f"(thunder_mlir.export / jax.export): {type(e).__name__}: {e}") from None


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
        raise OptError(f"cannot parse '{source_name}'", diagnostics=_diagnostics(e)) from None
    op = parsed.operation
    module = ir.Module.create(loc=op.location)
    if op.name == "builtin.module":  # move the body and attributes (sym_name) over
        for name in list(op.attributes):  # iterating an attribute map gives the names
            module.operation.attributes[name] = op.attributes[name]
        for child in list(op.regions[0].blocks[0].operations):
            module.body.append(child)
    else:
        module.body.append(op)
    _verify_prims(module, f"invalid IR in '{source_name}'", source_name)
    return module


_FILE_LOC = re.compile(r'"((?:[^"\\]|\\.)*)":(\d+):(\d+)')


def _verify_prims(module: ir.Module, what: str, source_name: str | None = None) -> None:
    """MLIR's verifier checks the ops' fields; each prim's ``PrimDef.infer`` checks its
    operand and result types (``verify_prim_ops``). Raises OptError with the diagnostics."""
    errors = verify_prim_ops(module.operation)
    if errors:
        raise OptError(what, diagnostics=[diagnostic_at(loc, msg, source_name)
                                          for loc, msg in errors])


def diagnostic_at(location, message: str, source_name: str | None) -> Diagnostic:
    """A diagnostic at ``location`` (an ir.Location or None): the first file location in
    it (``loc("f.mlir":3:5)``, also inside a name, call-site or fused location), else the
    input file with no line."""
    m = _FILE_LOC.search(str(location)) if location is not None else None
    if m is None:
        return Diagnostic(message, source_name)
    return Diagnostic(message, m.group(1), int(m.group(2)), int(m.group(3)))


def _diagnostics(e: ir.MLIRError) -> list[Diagnostic]:
    """The error diagnostics of ``e`` (the binding's raised form of MLIR diagnostics)."""
    diags = [diagnostic_at(d.location, d.message, None) for d in e.error_diagnostics]
    return diags or [Diagnostic(str(e))]


def print_modules(texts: list[str]) -> str:
    """Module texts, separated by ``// -----`` lines when there are several."""
    return f"{SPLIT_MARKER}\n".join(texts)


def _asm(module: ir.Module, debuginfo: bool) -> str:
    return module.operation.get_asm(enable_debug_info=debuginfo)


# ----------------------------------------------------------------------- run
def run_stage(stage: Stage, module: ir.Module, source_name: str) -> None:
    """Run one stage on ``module`` and verify the result; failures become OptError with
    the diagnostics (the failing op's location where the pass names it)."""
    try:
        with module.context, ir.Location.unknown():
            stage.run(module)
    except ir.MLIRError as e:
        raise OptError(f"pass '{stage.argument}' failed", diagnostics=_diagnostics(e)) from None
    except (ThunderError, NotImplementedError) as e:  # e.g. LoweringError naming the op
        where = getattr(e, "location", None)
        raise OptError(f"pass '{stage.argument}' failed: {e}",
                       diagnostics=[diagnostic_at(where, str(e), source_name)]) from None
    try:
        module.operation.verify()
    except ir.MLIRError as e:
        raise OptError(f"invalid IR after pass '{stage.argument}'",
                       diagnostics=_diagnostics(e)) from None
    _verify_prims(module, f"invalid IR after pass '{stage.argument}'")


def _sanitize(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")


def _selected(names: list[str] | None) -> set[str]:
    return {n.strip() for arg in names or () for n in arg.split(",") if n.strip()}


class Timer:
    """Wall time per name, in first-use order (mlir-opt's ``--mlir-timing`` report)."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.start = time.perf_counter()

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def report(self) -> str:
        """The report in mlir-opt's layout (``mlir/lib/Support/Timing.cpp``)."""
        total = time.perf_counter() - self.start
        rule = "===" + "-" * 73 + "==="
        rows = list(self.seconds.items())
        rows.append(("Rest", max(total - sum(self.seconds.values()), 0.0)))
        rows.append(("Total", total))
        lines = [rule, "... Execution time report ...".center(79).rstrip(), rule,
                 f"  Total Execution Time: {total:.4f} seconds", "",
                 "  ----Wall Time----  ----Name----"]
        for name, sec in rows:
            pct = 100.0 * sec / total if total > 0 else 0.0
            lines.append(f"  {sec:8.4f} ({pct:5.1f}%)  {name}")
        return "\n".join(lines) + "\n"


@dataclass
class ChunkResult:
    """The outcome of one input chunk: its printed result, or the error that stopped it;
    ``dumps``: its text after each stage (for ``--dump-dir``)."""

    text: str | None = None
    error: OptError | None = None
    dumps: list[str] = field(default_factory=list)


def process_chunk(chunk: str, source_name: str, stages: list[Stage],
                  args: argparse.Namespace, timer: Timer | None) -> ChunkResult:
    """Parse one chunk, run the stages (printing IR before/after as asked) and print it."""
    result = ChunkResult()
    before, after = _selected(args.mlir_print_ir_before), _selected(args.mlir_print_ir_after)
    t = time.perf_counter()
    try:
        module = parse_module(chunk, source_name)
    except OptError as e:
        result.error = e
        return result
    finally:
        if timer:
            timer.add("Parser", time.perf_counter() - t)
    for stage in stages:
        if args.mlir_print_ir_before_all or stage.pass_name in before:
            _dump_ir("Before", stage, module, args)
        t = time.perf_counter()
        try:
            run_stage(stage, module, source_name)
        except OptError as e:
            result.error = e
            return result
        finally:
            if timer:
                timer.add(stage.title, time.perf_counter() - t)
        if args.mlir_print_ir_after_all or stage.pass_name in after:
            _dump_ir("After", stage, module, args)
        if args.dump_dir:
            result.dumps.append(_asm(module, args.mlir_print_debuginfo))
    t = time.perf_counter()
    result.text = _asm(module, args.mlir_print_debuginfo)
    if timer:
        timer.add("Output", time.perf_counter() - t)
    return result


def _dump_ir(when: str, stage: Stage, module: ir.Module, args: argparse.Namespace) -> None:
    """mlir-opt's IR dump: ``// -----// IR Dump After Grad (grad) //----- //`` and the
    module, to stderr (``mlir/lib/Pass/IRPrinting.cpp``)."""
    sys.stderr.write(f"// -----// IR Dump {when} {stage.title} ({stage.pass_name}) //----- //\n"
                     f"{_asm(module, args.mlir_print_debuginfo)}\n")
    sys.stderr.flush()


def optimize(args: argparse.Namespace) -> str:
    """Parse, run the pipeline (with dumps), and return the printed result. Raises OptError
    for the first chunk that fails (or, under ``--verify-diagnostics``, for diagnostics
    that differ from the expected ones)."""
    with get_context():
        pipeline = args.pass_pipeline if args.pass_pipeline is not None else args.passes
        if args.pass_pipeline is not None and args.passes is not None:
            raise OptError("give the pipeline once: -p or --pass-pipeline", code=2)
        stages = build_pipeline(pipeline)  # usage errors before reading any input
        text, source_name = read_source(args.input)
        timer = Timer() if args.mlir_timing else None
        chunks = split_source(text, args.split_input_file)
        results = []
        for chunk in chunks:
            results.append(process_chunk(chunk, source_name, stages, args, timer))
            if results[-1].error is not None and not args.verify_diagnostics:
                break
        if timer:
            sys.stderr.write(timer.report())
        if args.verify_diagnostics:
            verify_diagnostics(chunks, results, source_name)
        else:
            for r in results:
                if r.error is not None:
                    raise r.error
        if args.dump_dir:
            Path(args.dump_dir).mkdir(parents=True, exist_ok=True)
            for index, stage in enumerate(stages):
                out = Path(args.dump_dir) / f"{index}_{_sanitize(stage.pass_name)}.mlir"
                out.write_text(print_modules([r.dumps[index] for r in results
                                              if len(r.dumps) > index]))
        return print_modules([r.text for r in results if r.text is not None])


# --------------------------------------------------------- --verify-diagnostics
_EXPECTED = re.compile(r"//\s*expected-(error|warning|note|remark)\s*"
                       r"(@[+-]\d+|@above|@below|@unknown)?\s*\{\{(.*?)\}\}")


@dataclass
class Expected:
    """An ``expected-<severity> @<where> {{text}}`` comment: the diagnostic it expects
    (``line`` None: ``@unknown``, a diagnostic with no location) and whether one came."""

    severity: str
    line: int | None
    text: str
    comment_line: int
    seen: bool = False


def expected_diagnostics(text: str) -> list[Expected]:
    """The expected diagnostics written in ``text`` (mlir-opt's ``SourceMgrDiagnosticVerifier
    Handler``: ``@+N``/``@-N`` relative to the comment's line, ``@above``/``@below`` the
    previous/next non-comment line, nothing: the comment's own line)."""
    lines = text.split("\n")
    out = []
    for number, line in enumerate(lines, start=1):
        for m in _EXPECTED.finditer(line):
            where, target = m.group(2), number
            if where == "@unknown":
                target = None
            elif where in ("@above", "@below"):
                step = -1 if where == "@above" else 1
                target = number + step
                while 1 <= target <= len(lines) and lines[target - 1].lstrip().startswith("//"):
                    target += step
            elif where:
                target = number + int(where[1:])
            out.append(Expected(m.group(1), target, m.group(3), number))
    return out


def verify_diagnostics(chunks: list[str], results: list[ChunkResult], source_name: str) -> None:
    """Match each chunk's produced diagnostics against its expected ones; OptError listing
    every unexpected diagnostic and every expected one not produced."""
    problems = []
    for chunk, result in zip(chunks, results):
        expected = expected_diagnostics(chunk)
        produced = result.error.diagnostics if result.error is not None else []
        if result.error is not None and not produced:
            produced = [Diagnostic(str(result.error), source_name)]
        for d in produced:
            line = d.line if d.file == source_name else None
            match = next((x for x in expected if x.severity == d.severity and not x.seen
                          and x.line == line and x.text in d.message), None)
            if match is None:
                problems.append(Diagnostic(f"unexpected {d.severity}: {d.message}", d.file,
                                           d.line, d.col))
            else:
                match.seen = True
        for x in expected:
            if not x.seen:
                problems.append(Diagnostic(f'expected {x.severity} "{x.text}" was not produced',
                                           source_name, x.comment_line, 1))
    if problems:
        raise OptError("--verify-diagnostics: the diagnostics differ from the expected ones",
                       diagnostics=problems)


def list_passes() -> str:
    """The registry as ``name{options}  summary`` lines, plus a note on upstream passes."""
    rows = [(cls().pipeline_element(), cls.summary) for cls in PASSES.values()]
    width = max(len(r[0]) for r in rows)
    lines = [f"  {element:<{width}}  {summary}" for element, summary in rows]
    return ("thunder passes (thunder_mlir.transforms.registry.PASSES; options at their "
            "defaults):\n" + "\n".join(lines) +
            "\nAny other element is passed to MLIR's PassManager "
            "(e.g. canonicalize, cse, symbol-dce, func.func(cse)).\n")


def make_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    summary = __doc__.split("\n\n")[0].replace("``", "")
    p = argparse.ArgumentParser(prog=PROG, description=summary,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", nargs="?", default="-", help="input .mlir file ('-': stdin)")
    p.add_argument("--pass-pipeline", metavar="PIPELINE",
                   help="the textual pass pipeline, e.g. "
                        "'builtin.module(decompose,grad{remat=true})' (as mlir-opt)")
    p.add_argument("-p", "--passes", metavar="PIPELINE",
                   help="the same, short form: decompose,partition,lower-to-stablehlo")
    p.add_argument("-o", "--output", metavar="OUT", default="-", help="output file ('-': stdout)")
    p.add_argument("--mlir-print-ir-after-all", "--print-ir-after-all", action="store_true",
                   help="print the module to stderr after each pass")
    p.add_argument("--mlir-print-ir-before-all", action="store_true",
                   help="print the module to stderr before each pass")
    p.add_argument("--mlir-print-ir-after", metavar="PASS", action="append",
                   help="print the module to stderr after each run of PASS")
    p.add_argument("--mlir-print-ir-before", metavar="PASS", action="append",
                   help="print the module to stderr before each run of PASS")
    p.add_argument("--verify-diagnostics", action="store_true",
                   help="check the diagnostics against the file's expected-error comments")
    p.add_argument("--mlir-timing", action="store_true",
                   help="print a wall-time report per pass to stderr")
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
        with implementations.holding():  # the run's registrations (grad's VJP closures)
            result = optimize(args)
        if args.output == "-":
            sys.stdout.write(result)
        else:
            Path(args.output).write_text(result)
    except OptError as e:
        sys.stderr.write(e.report())
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
