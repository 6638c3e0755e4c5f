"""Passes as values, and the one registry that ``jit`` and ``thunder-opt`` share.

A pass is a small frozen dataclass (xDSL's ``ModulePass`` style): its class has a ``name``
(the pipeline element, ``grad``) and a ``summary``; its fields are its options, typed
``bool``, ``int``, ``str`` or ``tuple[str, ...]``. A pass value prints as the element that
parses back to it, and the pipeline ``jit`` runs to make each stage of ``last_traces`` is
recorded in that form, so ``thunder-opt --pass-pipeline=...`` reproduces the stage.

Pipeline syntax (mlir-opt's textual pass pipeline, ``mlir::parsePassPipeline``):

    builtin.module(decompose,grad{remat=true})     # anchored on the module
    decompose,grad{remat=false}                     # the short form of the same
    execution-transform{executors=myex,other}       # a list option: comma-separated

Options inside ``{}`` are separated by spaces and spelled with dashes (``keep-outputs``);
underscores (``keep_outputs``) are accepted too. Booleans are ``true``/``false`` (an option
written without ``=value`` is true). An unknown pass or option raises ``PipelineError``
with a "did you mean" suggestion (``difflib``).

Passes of higher layers (``execution-transform``, defined by the executors) register
themselves with ``register_pass`` when their module is imported; ``jit`` and
``thunder-opt`` import them.

State a pass needs that is not in the IR (the Python callables of executor calls, the
arguments recorded for user executors) reaches it through a ``PassContext``; under
``thunder-opt`` it is empty.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from dataclasses import dataclass
from typing import Any, ClassVar

from torch_mlir import ir

from thunder_mlir.errors import PipelineError
from thunder_mlir.transforms import cudnn_attention, decompose, fused_attention, grad, joint, \
    lower_to_stablehlo, merge_dots, partition


@dataclass
class PassContext:
    """What ``jit`` gives passes besides the module: ``compile_state`` (the
    user executors of the compilation and the calls recorded for them,
    ``executors.extend.CompileState``; None: resolved from the executor registry) and
    ``device`` (the program's torch.device; None: the module's ``thunder.device``)."""

    compile_state: Any = None
    device: Any = None


@dataclass(frozen=True)
class ModulePass:
    """A module-to-module transform with typed options (the dataclass fields).

    Subclasses set ``name`` and ``summary`` and implement ``apply(module, ctx)``, which
    mutates ``module`` in place and raises a ThunderError subclass (with a ``location``
    attribute, the op's MLIR location, where an op is at fault) on failure."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""

    def apply(self, module: ir.Module, ctx: PassContext) -> None:
        raise NotImplementedError

    def __call__(self, module: ir.Module, ctx: PassContext | None = None) -> None:
        """Run the pass on ``module`` (with an empty context by default)."""
        self.apply(module, ctx if ctx is not None else PassContext())

    def pipeline_element(self) -> str:
        """The pipeline text that parses to this value: the name, then every option in
        braces (``grad{remat=true}``), as mlir-opt prints a pipeline."""
        opts = [f"{_option_name(f.name)}={_format(getattr(self, f.name))}"
                for f in dataclasses.fields(self)]
        return self.name + ("{" + " ".join(opts) + "}" if opts else "")

    def __str__(self) -> str:
        return self.pipeline_element()


PASSES: dict[str, type[ModulePass]] = {}


def register_pass(cls: type[ModulePass]) -> type[ModulePass]:
    """Class decorator: make ``cls`` known by ``cls.name``. Raises ValueError if another
    class has that name."""
    prev = PASSES.get(cls.name)
    if prev is not None and prev is not cls:
        raise ValueError(f"a pass named '{cls.name}' is already registered ({prev.__name__})")
    PASSES[cls.name] = cls
    return cls


def get_pass(name: str) -> type[ModulePass]:
    """The pass class registered as ``name``; PipelineError with a suggestion otherwise."""
    try:
        return PASSES[name]
    except KeyError:
        raise PipelineError(f"unknown pass '{name}'{did_you_mean(name, PASSES)}; "
                            f"known passes: {', '.join(PASSES)}") from None


def did_you_mean(word: str, choices) -> str:
    """``" (did you mean 'x'?)"`` for the closest of ``choices`` (difflib), or ``""``."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


# ------------------------------------------------------------------- parsing
def split_top_level(text: str, sep: str = ",") -> list[str]:
    """Split ``a,b(c,d),e{x=1 y=2}`` at ``sep`` outside brackets and braces."""
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    parts.append(current.strip())
    return parts


def strip_anchor(text: str) -> str:
    """``builtin.module(P)`` -> ``P``; other text unchanged (the short form)."""
    text = text.strip()
    if text.startswith("builtin.module(") and text.endswith(")"):
        return text[len("builtin.module("):-1].strip()
    return text


def parse_element(element: str) -> ModulePass:
    """One pipeline element (``grad{remat=false}``) -> a pass value. Raises PipelineError."""
    element = element.strip()
    name, _, rest = element.partition("{")
    name = name.strip()
    cls = get_pass(name)
    options: dict[str, Any] = {}
    if rest:
        if not rest.rstrip().endswith("}"):
            raise PipelineError(f"missing '}}' in pass options of '{element}'")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        hints = typing.get_type_hints(cls)
        for item in rest.rstrip()[:-1].split():
            key, eq, value = item.partition("=")
            attr = key.replace("-", "_")
            if attr not in fields:
                known = [_option_name(f) for f in fields]
                raise PipelineError(
                    f"pass '{name}' has no option '{key}'{did_you_mean(_option_name(attr), known)}"
                    f"; its options: {', '.join(known) or '(none)'}")
            options[attr] = _convert(name, key, value if eq else "true", hints[attr])
    return cls(**options)


def parse_pipeline(text: str) -> list[ModulePass]:
    """``builtin.module(a,b{x=1})`` or ``a,b{x=1}`` -> pass values, in order. Raises
    PipelineError for an unknown pass or option, a bad value or an empty element."""
    body = strip_anchor(text)
    if not body:
        return []
    elements = split_top_level(body)
    if any(not e for e in elements):
        raise PipelineError(f"empty element in pass pipeline '{text}'")
    return [parse_element(e) for e in elements]


def pipeline_string(passes) -> str:
    """The anchored pipeline text of ``passes`` (``builtin.module(decompose,partition)``)."""
    return "builtin.module(" + ",".join(p.pipeline_element() for p in passes) + ")"


def _option_name(attr: str) -> str:
    return attr.replace("_", "-")


def _format(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return str(value)


def _convert(pass_name: str, key: str, value: str, hint):
    if hint is bool:
        if value not in ("true", "false", "1", "0"):
            raise PipelineError(f"pass '{pass_name}': option '{key}' expects true or false, "
                                f"got '{value}'")
        return value in ("true", "1")
    if hint is int:
        try:
            return int(value)
        except ValueError:
            raise PipelineError(f"pass '{pass_name}': option '{key}' expects an integer, "
                                f"got '{value}'") from None
    if typing.get_origin(hint) is tuple:
        return tuple(v for v in value.split(",") if v)
    return value


# ------------------------------------------------------------------ the passes

@register_pass
@dataclass(frozen=True)
class Decompose(ModulePass):
    """``decompose``: inline composites into their prim decompositions."""

    name: ClassVar[str] = decompose.NAME
    summary: ClassVar[str] = "inline composites into their prim decompositions"

    def apply(self, module: ir.Module, ctx: PassContext) -> None:
        decompose.run(module)


@register_pass
@dataclass(frozen=True)
class FusedAttention(ModulePass):
    """``fused-attention``: scaled_dot_product_attention calls cuDNN's flash attention takes
    -> ``flash_attention`` composites (out, log-sum-exp); the others are marked with why
    (fused_attention.py). Before ``grad``: the backward then saves no probabilities."""

    name: ClassVar[str] = fused_attention.NAME
    summary: ClassVar[str] = "attention calls -> flash_attention composites (GPU target)"

    def apply(self, module: ir.Module, ctx: PassContext) -> None:
        fused_attention.run(module, ctx.device)


@register_pass
@dataclass(frozen=True)
class CudnnAttention(ModulePass):
    """``cudnn-attention``: ``flash_attention(_backward)`` composites -> the
    ``cudnn_attention(_backward)`` prims, lowered to cuDNN's fused attention custom calls
    (cudnn_attention.py). GPU target, before ``decompose``."""

    name: ClassVar[str] = cudnn_attention.NAME
    summary: ClassVar[str] = "flash_attention composites -> cuDNN attention prims (GPU)"

    def apply(self, module: ir.Module, ctx: PassContext) -> None:
        cudnn_attention.run(module, ctx.device)


@register_pass
@dataclass(frozen=True)
class Grad(ModulePass):
    """``grad{remat=true}``: reverse-mode AD, ``@computation`` -> ``@forward`` (outputs, then
    residuals) + ``@backward`` (grad.py). ``remat``: save the fewest bytes from
    which the backward can recompute what it reads (the min cut over cheap ops,
    ``grad.RECOMPUTABLE``; rematerialization); false saves every forward value the
    backward reads. ``save-materialized``: with ``remat``, a value that a gemm,
    convolution or custom call of the backward reads is saved, never recomputed (torch's
    partitioner's ``ban_if_materialized_backward``; the GPU target's choice)."""

    name: ClassVar[str] = grad.NAME
    summary: ClassVar[str] = "reverse-mode AD: @computation -> @forward + @backward"
    remat: bool = True
    save_materialized: bool = False

    def apply(self, module: ir.Module, ctx: PassContext) -> None:
        grad.run(module, remat=self.remat, save_materialized=self.save_materialized)


@register_pass
@dataclass(frozen=True)
class Joint(ModulePass):
    """``joint{keep-outputs=false}``: ``@forward`` + ``@backward`` -> ``@computation``
    returning the gradients for ones cotangents (``thunder_mlir.grad``); ``keep-outputs``:
    the outputs first, then the gradients (``value_and_grad``)."""

    name: ClassVar[str] = joint.NAME
    summary: ClassVar[str] = ("@forward + @backward -> @computation returning the gradients "
                              "for ones cotangents, dead code eliminated (thunder_mlir.grad)")
    keep_outputs: bool = False

    def apply(self, module: ir.Module, ctx: PassContext) -> None:
        joint.run(module, keep_outputs=self.keep_outputs)


@register_pass
@dataclass(frozen=True)
class MergeDots(ModulePass):
    """``merge-dots``: one dot for the dots that share an operand and whose other operands
    are computed values differing in one free dimension (merge_dots.py)."""

    name: ClassVar[str] = merge_dots.NAME
    summary: ClassVar[str] = "merge dots sharing an operand into one (horizontal fusion)"

    def apply(self, module: ir.Module, ctx: PassContext) -> None:
        merge_dots.run(module)


@register_pass
@dataclass(frozen=True)
class Partition(ModulePass):
    """``partition``: outline XLA regions; executor calls stay in the plan functions."""

    name: ClassVar[str] = partition.NAME
    summary: ClassVar[str] = "outline XLA regions; executor calls stay in the plan"

    def apply(self, module: ir.Module, ctx: PassContext) -> None:
        partition.run(module)


@register_pass
@dataclass(frozen=True)
class LowerToStablehlo(ModulePass):
    """``lower-to-stablehlo{computed-once=true,accumulate-f32=true}``: dialect conversion of
    each XLA region to StableHLO/CHLO. ``computed-once``: sine and cosine lowered so that
    XLA:CPU's fusion computes them once (``hlo.lower_computed_once``); false lowers them to
    ``stablehlo.sine``/``cosine`` alone. ``accumulate-f32``: 16-bit dots and convolutions
    get a float32 result and one convert (``hlo._accumulated_in_f32``); both are the CPU
    target's choices. ``narrow-dots``: a float32 dot of values converted from 16 bits
    reads the 16-bit values (``hlo._widened_16bit``; the GPU target's choice).
    ``batch-group-taps``: a depthwise convolution's weight gradient (batch groups of one
    row) is one multiply-and-reduce per window position (``hlo._batch_group_taps``; the CPU
    target's choice). ``blocked-contractions``: a float32 convolution whose window is its
    whole input (a 1 x 1 convolution's weight gradient) is summed in blocks
    (``hlo._blocked_contraction``; the CPU target's choice). pipeline.Target decides them."""

    name: ClassVar[str] = lower_to_stablehlo.NAME
    summary: ClassVar[str] = "dialect conversion of each region to StableHLO/CHLO"
    computed_once: bool = True
    accumulate_f32: bool = True
    narrow_dots: bool = False
    batch_group_taps: bool = True
    blocked_contractions: bool = True

    def apply(self, module: ir.Module, ctx: PassContext) -> None:
        lower_to_stablehlo.run(module, computed_once=self.computed_once,
                               accumulate_f32=self.accumulate_f32,
                               narrow_dots=self.narrow_dots,
                               batch_group_taps=self.batch_group_taps,
                               blocked_contractions=self.blocked_contractions)


__all__ = ["ModulePass", "PassContext", "PipelineError", "PASSES", "register_pass",
           "get_pass", "parse_pipeline", "parse_element", "pipeline_string", "did_you_mean"]
