"""litgpt models (issue 48): tiny random-init configurations drawn from litgpt's own config
list, jitted whole (``thunder_mlir.jit(model)``), compared with eager on the forward's
logits, a training step's gradients, and KV-cache decoding with litgpt's ``generate``
(greedy: the tokens must be eager's).

The KV cache path is what issue 48 is about: ``set_kv_cache`` leaves ``mask_cache`` as a
plain tensor attribute of the model (neither parameter nor buffer), which the jitted
module reads as a program input at every call (frontend/module_attributes.py). Prefill
and the decode step compile once each, and the decode steps reuse one program across
positions (the position is a tensor input). Gemma-2's sliding-window cache reads
``max_pos = input_pos.max().item()`` and slices the cache to ``max_pos + 1`` while
``max_pos`` is inside the window: the ``.item()`` is a symbol (frontend/value_guards.py
``_value_symbol``) and the slice's length ``max_pos + 1`` a symbolic size
(``slice_by_value``), so one program serves every position inside the first window, its
XLA region compiled once for every length up to the window (bounded dynamic shapes,
runtime/bounded_shapes.py), and one more every later position (its guard is
``max_pos >= window``).

CI runs parts of three families (``CI_PARTS``: Llama-3's training step and decoding,
Gemma-2's decoding, Mixtral's forward; ~30 s at load 3); the other parts and architectures of
litgpt's list (one representative each) are skipped with their names, and
``THUNDER_LITGPT_ALL=1`` runs every part of every configuration of the list.
"""

from __future__ import annotations

import copy
import os

import pytest
import torch

import thunder_mlir
from thunder_mlir.runtime import refine

_refine = refine.refine

litgpt = pytest.importorskip("litgpt", reason="the litgpt tests need litgpt (test extras)")
from litgpt.config import configs as _CONFIGS
from litgpt.generate.base import generate

ALL = os.environ.get("THUNDER_LITGPT_ALL") == "1"
# what CI runs of each family (the CI budget: docs/compat.md "What make test leaves out")
CI_PARTS = {"Llama-3.2-1B": ("training", "decode"), "Gemma-2-2b": ("decode",),
            "Mixtral-8x7B-v0.1": ("forward",)}
CI = tuple(CI_PARTS)
VOCAB = 64
# the config fields that change the model's code path (the rest are sizes)
_ARCHITECTURE = ("mlp_class_name", "norm_class_name", "parallel_residual", "bias",
                 "shared_attention_norm", "post_attention_norm", "post_mlp_norm", "norm_qk",
                 "latent_attention", "gelu_approximate")


def _architecture(c: dict) -> tuple:
    return tuple(str(c.get(k)) for k in _ARCHITECTURE) + (
        bool(c.get("sliding_window_size")), bool(c.get("attention_logit_softcapping")),
        c.get("rotary_percentage", 1) != 1, bool(c.get("n_expert")))


def _names() -> list[str]:
    """Every config name (THUNDER_LITGPT_ALL=1), else the CI families and one
    representative of each other architecture (skipped, naming it)."""
    if ALL:
        return [c["name"] for c in _CONFIGS]
    seen = {_architecture(c) for c in _CONFIGS if c["name"] in CI}
    out = list(CI)
    for c in _CONFIGS:
        a = _architecture(c)
        if a not in seen:
            seen.add(a)
            out.append(c["name"])
    return out


def _model(name: str) -> torch.nn.Module:
    """A tiny random-init model of config ``name``: 1 layer (2 with sliding windows, which
    alternate), width 32, vocabulary 64."""
    base = litgpt.Config.from_name(name)
    heads = 4
    groups = heads if base.n_query_groups == base.n_head else \
        (1 if base.n_query_groups == 1 else 2)
    sizes = {"n_layer": 2 if base.sliding_window_size else 1, "n_embd": 32, "n_head": heads,
             "n_query_groups": groups, "head_size": 8, "intermediate_size": 64,
             "padded_vocab_size": VOCAB, "vocab_size": VOCAB, "block_size": 32}
    if base.n_expert:
        sizes.update(n_expert=4, n_expert_per_token=2, moe_intermediate_size=32)
    if base.sliding_window_size:
        sizes.update(sliding_window_size=8)
    if base.latent_attention:
        pytest.skip(f"{name}: multi-head latent attention sizes are not scaled down here")
    torch.manual_seed(0)
    return litgpt.GPT(litgpt.Config.from_name(name, **sizes))


def _skip_unless_run(name: str, part: str) -> None:
    if ALL:
        return
    if name not in CI:
        pytest.skip(f"{name}: another litgpt architecture, left out of CI (time); "
                    "THUNDER_LITGPT_ALL=1 runs every config of litgpt's list")
    if part not in CI_PARTS[name]:
        pytest.skip(f"{name}: its {part} is left out of CI (time); THUNDER_LITGPT_ALL=1 "
                    "runs it")


@pytest.mark.parametrize("name", _names())
def test_forward_is_eager(name):
    _skip_unless_run(name, "forward")
    model = _model(name).eval()
    jm = thunder_mlir.jit(copy.deepcopy(model))
    ids = torch.randint(0, VOCAB, (1, 8), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(jm(ids), model(ids), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", _names())
def test_training_step_is_eager(name):
    _skip_unless_run(name, "training")
    model = _model(name)
    mine = copy.deepcopy(model)
    jm = thunder_mlir.jit(mine)
    ids = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(1))
    targets = torch.roll(ids, -1, 1)

    def loss(m):
        logits = m(ids)
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten()), \
            logits

    (le, oe), (lj, oj) = loss(model), loss(jm)
    torch.testing.assert_close(oj, oe, rtol=1e-4, atol=1e-5)
    le.backward()
    lj.backward()
    for (n, p), q in zip(model.named_parameters(), mine.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=n)


@pytest.mark.parametrize("name", _names())
def test_kv_cache_generate_is_eager_with_one_decode_program(name, monkeypatch):
    _skip_unless_run(name, "decode")
    model = _model(name).eval()
    model.max_seq_length = 24
    mine = copy.deepcopy(model)
    jm = thunder_mlir.jit(mine)
    sliding = model.config.sliding_window_size is not None and \
        any(model.config.sliding_window_indices or ())
    # with a sliding window (8), a short prompt leaves 6 decode positions inside it
    p = 2 if sliding else 6
    prompt = torch.randint(0, VOCAB, (p,), generator=torch.Generator().manual_seed(2))
    refined: list = []  # regions compiled per input shape (runtime/refine.py)
    monkeypatch.setattr(refine, "refine", lambda text, shapes: refined.append(shapes) or
                        _refine(text, shapes))
    n = 8
    with torch.no_grad():
        model.set_kv_cache(batch_size=1)
        ref = generate(model, prompt, p + n, temperature=0.0)
        jm.set_kv_cache(batch_size=1)  # (the wrapped module's method)
        out = generate(jm, prompt, p + n, temperature=0.0)
    assert torch.equal(out, ref)
    assert mine.mask_cache is not None and mine.mask_cache.shape[-1] == 24
    # prefill, then one program for every decode position; with a sliding window, one for
    # the positions inside the first window (2 to 7 here: one trace, and its XLA region
    # compiled once for every length, not once per length) and one for every later position
    programs = 2 + sliding
    assert thunder_mlir.cache_misses(jm) == programs
    assert thunder_mlir.cache_hits(jm) == n - programs
    # no XLA compile per position: the window's slices are bounded dynamic shapes (the
    # MoE families compile their expert regions per routing size, 0 or 1 token here)
    assert refined == [] or model.config.n_expert
    if sliding:
        return  # (the caches' reset below is the same mechanism for every family: CI time)
    # the caches emptied in place and mask_cache reassigned: the same programs read them
    with torch.no_grad():
        for block in mine.transformer.h:
            block.attn.kv_cache.reset_parameters()
        mine.mask_cache = mine.mask_cache.clone()
        assert torch.equal(generate(jm, prompt, 6 + n, temperature=0.0), ref)
    # (the second prefill is compiled once more, its length dynamic since the decode
    # steps changed it: automatic dynamic shapes; the decode program is reused)
    assert thunder_mlir.cache_misses(jm) == 3
