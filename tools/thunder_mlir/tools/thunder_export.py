"""``thunder-export``: export a PyTorch program to a portable StableHLO artifact from the
command line (``thunder_mlir.export``, docs/export.md).

    thunder-export mypkg.models:TinyNet --input 2x3x32x32:float32 -o tiny.bin
    thunder-export models.py:make_gpt2() --input 2x8:int64 --kwarg use_cache=False -o g.bin
    thunder-export mypkg.models:TinyNet --input batch=2x3x32x32 --weights arguments -o t.bin
    thunder-export mypkg.fns:attention --input 2x4x16x8 --input 2x4x16x8 --mlir -

``TARGET`` is ``MODULE:NAME`` (an importable module, or a ``.py`` file) naming an
``nn.Module`` instance, an ``nn.Module`` class (instantiated without arguments), or a
function of tensors; ``NAME()`` calls the named object without arguments and exports what
it returns (a model factory). ``--eval`` puts a module in eval mode first.

Each ``--input`` gives one positional tensor argument, as ``SHAPE[:DTYPE]``: sizes joined
by ``x`` (``2x8``; a 0-d tensor is ``scalar``), the dtype by torch's name (``float32``, the
default; ``int64``, ``bfloat16``, ``bool``, ...). A size written ``NAME=SIZE``
(``batch=2x8``) is a dynamic dimension, ``torch.export.Dim(NAME)`` with the example size
``SIZE``; a name used at several places is one size (torch.export's and jax.export's
``symbolic_shape`` convention). Only shapes and dtypes matter: the program is traced on
meta tensors. ``--kwarg NAME=VALUE`` passes a Python keyword argument (a Python literal,
baked into the program).

``-o FILE`` writes the artifact in jax.export's serialization (``jax.export.deserialize``
and ``thunder_mlir.deserialize`` read it; ``thunder-opt FILE`` prints its module).
``--weights constants`` (the default here: the file runs on its own) folds a module's
parameters and buffers into the program; ``--weights arguments`` makes them inputs and
writes them, by input name, to ``FILE.weights.npz`` next to the artifact. ``--mlir FILE``
(``-`` for stdout) writes the StableHLO text. The inputs and outputs of ``@main`` are
printed (to stderr when the text goes to stdout).

Exit status: 0 on success, 1 when the program cannot be exported (``ExportError`` and the
jit's errors, which name the user's line), 2 for usage errors (a bad ``--input``, a target
that cannot be imported).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import sys
from pathlib import Path

PROG = "thunder-export"


class UsageError(Exception):
    """A command line that cannot be run (exit status 2)."""


def parse_input(spec: str) -> tuple[list, object]:
    """(sizes, dtype) of an ``--input`` spec: a size is an int or (name, example size).
    Raises UsageError naming what is wrong."""
    import torch

    shape_text, _, dtype_text = spec.partition(":")
    dtype_text = dtype_text or "float32"
    dtype = getattr(torch, dtype_text, None)
    if not isinstance(dtype, torch.dtype):
        raise UsageError(f"--input {spec}: unknown dtype '{dtype_text}' (torch's names: "
                         "float32, float16, bfloat16, float64, int64, int32, bool, ...)")
    if shape_text in ("scalar", ""):
        return [], dtype
    sizes = []
    for part in shape_text.split("x"):
        name, eq, size = part.rpartition("=")
        if not size.isdigit() or (eq and not name.isidentifier()):
            raise UsageError(f"--input {spec}: a size is an integer or NAME=SIZE (e.g. "
                             f"batch=2x8:int64), got '{part}'")
        sizes.append((name, int(size)) if eq else int(size))
    return sizes, dtype


def load_target(target: str):
    """The object ``MODULE:NAME`` (or ``FILE.py:NAME``, ``NAME()`` calling it) names.
    Raises UsageError when it cannot be found."""
    module_name, sep, attr = target.rpartition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"TARGET must be MODULE:NAME (or FILE.py:NAME), got '{target}'")
    call = attr.endswith("()")
    attr = attr.removesuffix("()")
    try:
        if module_name.endswith(".py"):
            path = Path(module_name)
            spec = importlib.util.spec_from_file_location(path.stem, path)
            if spec is None or not path.is_file():
                raise UsageError(f"no such file: {module_name}")
            module = importlib.util.module_from_spec(spec)
            sys.modules.setdefault(path.stem, module)
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except ImportError as e:
        raise UsageError(f"cannot import '{module_name}': {e}") from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"'{module_name}' has no attribute '{attr}'")
        obj = getattr(obj, part)
    return obj() if call else obj


def _program(obj, eval_mode: bool):
    import torch

    if isinstance(obj, type) and issubclass(obj, torch.nn.Module):
        obj = obj()
    if not callable(obj):
        raise UsageError(f"the target is a {type(obj).__name__}, not a function or module")
    if eval_mode and isinstance(obj, torch.nn.Module):
        obj.eval()
    return obj


def _kwarg(text: str) -> tuple[str, object]:
    name, eq, value = text.partition("=")
    if not eq or not name.isidentifier():
        raise UsageError(f"--kwarg {text}: expected NAME=VALUE")
    try:
        return name, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        raise UsageError(f"--kwarg {text}: the value must be a Python literal") from None


def make_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0]
                                .replace("``", ""),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", help="MODULE:NAME or FILE.py:NAME (NAME() calls a factory)")
    p.add_argument("--input", action="append", default=[], metavar="SHAPE[:DTYPE]",
                   help="one tensor argument, e.g. 2x8:int64 or batch=2x8:int64 (repeat)")
    p.add_argument("--kwarg", action="append", default=[], metavar="NAME=VALUE",
                   help="a Python keyword argument (a literal), e.g. use_cache=False")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write the serialized artifact (jax.export's format)")
    p.add_argument("--mlir", metavar="FILE", help="write the StableHLO text ('-': stdout)")
    p.add_argument("--weights", choices=("constants", "arguments"), default="constants",
                   help="a module's weights folded in (default) or inputs (written to "
                        "FILE.weights.npz)")
    p.add_argument("--eval", action="store_true", help="call .eval() on a module first")
    return p


def run(args: argparse.Namespace) -> int:
    """Export and write what ``args`` asks; returns the exit status."""
    import numpy as np
    import torch
    from torch.export import Dim

    import thunder_mlir
    from thunder_mlir.errors import ThunderError

    fn = _program(load_target(args.target), args.eval)
    inputs = [parse_input(s) for s in args.input]
    kwargs = dict(_kwarg(k) for k in args.kwarg)
    dims: dict[str, Dim] = {}
    tensors, dynamic = [], []
    for sizes, dtype in inputs:
        shape = [s[1] if isinstance(s, tuple) else s for s in sizes]
        tensors.append(torch.empty(shape, dtype=dtype, device="meta"))
        dynamic.append({d: dims.setdefault(s[0], Dim(s[0])) for d, s in enumerate(sizes)
                        if isinstance(s, tuple)} or None)
    dynamic_shapes = None
    if dims:  # torch.export's dict form, by the signature's parameter names
        import inspect

        target = fn.forward if isinstance(fn, torch.nn.Module) else fn
        try:
            names = list(inspect.signature(target).bind_partial(*tensors).arguments)
        except TypeError as e:
            raise UsageError(f"{len(tensors)} --input for {target.__qualname__}: {e}") from None
        dynamic_shapes = {n: d for n, d in zip(names, dynamic) if d}
    try:
        exp = thunder_mlir.export(fn, *tensors, dynamic_shapes=dynamic_shapes,
                                  weights=args.weights, **kwargs)
    except (ThunderError, TypeError, ValueError) as e:
        print(f"{PROG}: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    info = sys.stderr if args.mlir == "-" else sys.stdout
    print(f"inputs:  {', '.join(exp.input_names) or '(none)'}", file=info)
    print(f"outputs: {', '.join(exp.output_names)}", file=info)
    if exp.dims:
        print(f"dims:    {exp.dims}", file=info)
    if args.output:
        Path(args.output).write_bytes(exp.serialize())
        if exp.weights:
            np.savez(args.output + ".weights.npz",
                     **{n: t.detach().cpu().numpy() for n, t in exp.weights.items()})
    if args.mlir == "-":
        sys.stdout.write(exp.mlir_module())
    elif args.mlir:
        Path(args.mlir).write_text(exp.mlir_module())
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``thunder-export`` console script; returns the exit status."""
    args = make_parser().parse_args(argv)  # exits with 2 on usage errors
    try:
        return run(args)
    except UsageError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # writing -o or --mlir
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
