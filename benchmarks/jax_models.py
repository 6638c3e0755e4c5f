"""The GPU benchmark's models written in plain jax: the reference thunder_mlir's programs
are compared with (benchmarks/gpu_programs.py).

Each model computes what the Hugging Face model computes for the same call, written the
way a jax user would write it for a GPU: bfloat16 parameters and activations, float32
layer norms, softmax and loss, matmuls accumulating in float32 (XLA's default for
bfloat16 dots). Attention is either the plain formula (``attention="xla"``: scores in
float32, softmax, probabilities rounded to bfloat16 for the second matmul) or
``jax.nn.dot_product_attention(implementation="cudnn")`` (cuDNN's flash attention);
``"cudnn-opmath"`` also computes GPT-2's biased linear layers as PyTorch does on a GPU
(``_affine``: one rounding after the bias), the arithmetic thunder_mlir reproduces.

* ``gpt2``: GPT-2 (``GPT2LMHeadModel``: learned positions, pre-LN blocks, GELU (tanh),
  tied embeddings), 124M parameters at the default configuration.
* ``llama``: Llama (``LlamaForCausalLM``: RMSNorm, rotary embeddings, grouped KV heads,
  SiLU-gated MLP, untied head); the GPU bench's 1.1B shape is TinyLlama's.

Programs (each a function to ``jax.jit``, with its argument shapes):

* ``loss_and_grads``: forward and backward (the loss of ``labels=input_ids``: logits
  shifted by one, mean cross-entropy), the gradients of every parameter;
* ``train_step``: that and an AdamW update as ``torch.optim.AdamW`` computes it (PyTorch's
  docs; state in the parameters' dtype, math in float32), parameters and state donated;
* ``prefill``: the forward of one sequence without gradients, returning the logits and
  the keys and values of every layer as ``model(input_ids)`` returns its cache:
  ``[B, N, T, D]`` (transformers' ``DynamicCache`` concatenates the heads-major
  ``key.transpose(1, 2)``, a copy in eager too; before 2026-12-03 the reference returned
  them ``[B, T, N, D]``, the layout of the projection's output, which costs no copy);
* ``decode``: one token per sequence against a static KV cache of ``max_len`` positions
  (``StaticCache``): the new keys and values written at ``position``, attention over the
  cache masked past it; the caches donated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp

BF16, F32 = jnp.bfloat16, jnp.float32


@dataclass(frozen=True)
class GPT2Config:
    vocab: int = 50257
    positions: int = 2048
    hidden: int = 768
    layers: int = 12
    heads: int = 12
    eps: float = 1e-5


@dataclass(frozen=True)
class LlamaConfig:
    vocab: int = 32000
    positions: int = 2048
    hidden: int = 2048
    intermediate: int = 5632
    layers: int = 22
    heads: int = 32
    kv_heads: int = 4
    eps: float = 1e-6
    theta: float = 10000.0


def gpt2_shapes(c: GPT2Config) -> dict:
    """Parameter name -> shape (GPT-2's Conv1D weights are [in, out])."""
    d = c.hidden
    shapes = {"wte": (c.vocab, d), "wpe": (c.positions, d), "ln_f.g": (d,), "ln_f.b": (d,)}
    for i in range(c.layers):
        p = f"h{i}."
        shapes.update({p + "ln1.g": (d,), p + "ln1.b": (d,), p + "attn.w": (d, 3 * d),
                       p + "attn.b": (3 * d,), p + "proj.w": (d, d), p + "proj.b": (d,),
                       p + "ln2.g": (d,), p + "ln2.b": (d,), p + "fc.w": (d, 4 * d),
                       p + "fc.b": (4 * d,), p + "fc2.w": (4 * d, d), p + "fc2.b": (d,)})
    return shapes


def llama_shapes(c: LlamaConfig) -> dict:
    """Parameter name -> shape (weights are [in, out])."""
    d, hd = c.hidden, c.hidden // c.heads
    shapes = {"embed": (c.vocab, d), "norm": (d,), "head": (d, c.vocab)}
    for i in range(c.layers):
        p = f"l{i}."
        shapes.update({p + "in_norm": (d,), p + "q": (d, c.heads * hd),
                       p + "k": (d, c.kv_heads * hd), p + "v": (d, c.kv_heads * hd),
                       p + "o": (c.heads * hd, d), p + "post_norm": (d,),
                       p + "gate": (d, c.intermediate), p + "up": (d, c.intermediate),
                       p + "down": (c.intermediate, d)})
    return shapes


def _layer_norm(x, g, b, eps):
    x32 = x.astype(F32)
    mean = x32.mean(-1, keepdims=True)
    var = jnp.square(x32 - mean).mean(-1, keepdims=True)
    y = (x32 - mean) * jax.lax.rsqrt(var + eps)
    return (y * g.astype(F32) + b.astype(F32)).astype(x.dtype)


def _rms_norm(x, g, eps):
    x32 = x.astype(F32)
    y = x32 * jax.lax.rsqrt(jnp.square(x32).mean(-1, keepdims=True) + eps)
    return g * y.astype(x.dtype)


def _affine(h, w, b, impl: str):
    """h @ w + b. With ``impl`` ending in "-opmath", as PyTorch's 16-bit addmm computes it on
    a GPU (cuBLASLt's bias epilogue; Inductor keeps it: ``keep_addmm_fused_for_half_dtypes``):
    the bias added to the float32 product and one rounding; otherwise as jax computes
    ``h @ w + b``: the product rounded, then the bias added."""
    if impl.endswith("-opmath"):
        y = jnp.dot(h, w, preferred_element_type=F32) + b.astype(F32)
        return y.astype(h.dtype)
    return h @ w + b


def attention(q, k, v, impl: str, causal: bool = True, mask=None):
    """softmax(q k^T / sqrt(D) + mask) v for [B, T, N, D] q and [B, S, K, D] k, v (K
    divides N: grouped heads); ``mask``: bool [B, 1, T, S] or None."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    if impl.startswith("cudnn"):
        return jax.nn.dot_product_attention(q, k, v, mask=mask, is_causal=causal,
                                            implementation="cudnn")
    n, kv = q.shape[2], k.shape[2]
    if n != kv:
        k, v = jnp.repeat(k, n // kv, axis=2), jnp.repeat(v, n // kv, axis=2)
    s = jnp.einsum("btnd,bsnd->bnts", q, k, preferred_element_type=F32) * scale
    t, sk = q.shape[1], k.shape[1]
    if causal:
        keep = jnp.arange(sk)[None, :] <= jnp.arange(t)[:, None] + (sk - t)
        s = jnp.where(keep, s, -jnp.inf)
    if mask is not None:
        s = jnp.where(mask, s, -jnp.inf)
    p = jax.nn.softmax(s, axis=-1).astype(q.dtype)
    return jnp.einsum("bnts,bsnd->btnd", p, v, preferred_element_type=F32).astype(q.dtype)


def gpt2_forward(c: GPT2Config, params, ids, impl: str, cache=None, position=None):
    """Logits [B, T, V] and the per-layer (k, v) [B, S, N, D]; with ``cache`` (per-layer
    (k, v) of max_len positions) the T new tokens are written at ``position`` and attend
    to the cache up to them."""
    b, t = ids.shape
    n, hd = c.heads, c.hidden // c.heads
    pos = jnp.arange(t) if position is None else position + jnp.arange(t)
    x = params["wte"][ids] + params["wpe"][pos][None]
    kvs = []
    for i in range(c.layers):
        p = f"h{i}."
        h = _layer_norm(x, params[p + "ln1.g"], params[p + "ln1.b"], c.eps)
        qkv = _affine(h, params[p + "attn.w"], params[p + "attn.b"], impl)
        q, k, v = (a.reshape(b, t, n, hd) for a in jnp.split(qkv, 3, axis=-1))
        if cache is not None:
            ck, cv = cache[i]
            k = jax.lax.dynamic_update_slice(ck, k, (0, position, 0, 0))
            v = jax.lax.dynamic_update_slice(cv, v, (0, position, 0, 0))
            keep = (jnp.arange(k.shape[1]) <= position + t - 1)[None, None, None, :]
            a = attention(q, k, v, impl, causal=False,
                          mask=jnp.broadcast_to(keep, (b, 1, t, k.shape[1])))
        else:
            a = attention(q, k, v, impl)
        kvs.append((k, v))
        x = x + _affine(a.reshape(b, t, c.hidden), params[p + "proj.w"], params[p + "proj.b"],
                        impl)
        h = _layer_norm(x, params[p + "ln2.g"], params[p + "ln2.b"], c.eps)
        h = jax.nn.gelu(_affine(h, params[p + "fc.w"], params[p + "fc.b"], impl),
                        approximate=True)
        x = x + _affine(h, params[p + "fc2.w"], params[p + "fc2.b"], impl)
    x = _layer_norm(x, params["ln_f.g"], params["ln_f.b"], c.eps)
    return x @ params["wte"].T, kvs


def _rotary(c: LlamaConfig, positions, dtype):
    hd = c.hidden // c.heads
    inv = 1.0 / (c.theta ** (jnp.arange(0, hd, 2, dtype=F32) / hd))
    freqs = positions.astype(F32)[:, None] * inv[None, :]
    emb = jnp.concatenate([freqs, freqs], axis=-1)
    return jnp.cos(emb).astype(dtype), jnp.sin(emb).astype(dtype)


def _rotate(x, cos, sin):
    half = x.shape[-1] // 2
    rot = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos[None, :, None, :] + rot * sin[None, :, None, :]


def llama_forward(c: LlamaConfig, params, ids, impl: str, cache=None, position=None):
    """As ``gpt2_forward``, for Llama."""
    b, t = ids.shape
    n, kv, hd = c.heads, c.kv_heads, c.hidden // c.heads
    pos = jnp.arange(t) if position is None else position + jnp.arange(t)
    cos, sin = _rotary(c, pos, BF16)
    x = params["embed"][ids]
    kvs = []
    for i in range(c.layers):
        p = f"l{i}."
        h = _rms_norm(x, params[p + "in_norm"], c.eps)
        q = _rotate((h @ params[p + "q"]).reshape(b, t, n, hd), cos, sin)
        k = _rotate((h @ params[p + "k"]).reshape(b, t, kv, hd), cos, sin)
        v = (h @ params[p + "v"]).reshape(b, t, kv, hd)
        if cache is not None:
            ck, cv = cache[i]
            k = jax.lax.dynamic_update_slice(ck, k, (0, position, 0, 0))
            v = jax.lax.dynamic_update_slice(cv, v, (0, position, 0, 0))
            keep = (jnp.arange(k.shape[1]) <= position + t - 1)[None, None, None, :]
            a = attention(q, k, v, impl, causal=False,
                          mask=jnp.broadcast_to(keep, (b, 1, t, k.shape[1])))
        else:
            a = attention(q, k, v, impl)
        kvs.append((k, v))
        x = x + a.reshape(b, t, n * hd) @ params[p + "o"]
        h = _rms_norm(x, params[p + "post_norm"], c.eps)
        x = x + (jax.nn.silu(h @ params[p + "gate"]) * (h @ params[p + "up"])) @ params[p + "down"]
    x = _rms_norm(x, params["norm"], c.eps)
    return x @ params["head"], kvs


MODELS = {"gpt2": (GPT2Config, gpt2_shapes, gpt2_forward),
          "llama": (LlamaConfig, llama_shapes, llama_forward)}


def _loss(forward, c, params, ids, impl):
    logits, _ = forward(c, params, ids, impl)
    logp = jax.nn.log_softmax(logits[:, :-1].astype(F32), axis=-1)
    nll = -jnp.take_along_axis(logp, ids[:, 1:, None], axis=-1)[..., 0]
    return nll.mean()


def programs(model: str, config, impl: str, batch: int, seq: int):
    """{program name: (function, argument shapes as jax.ShapeDtypeStruct pytrees (without
    shardings), donated argument numbers)} for ``model`` ("gpt2" or "llama")."""
    _, shapes_of, forward = MODELS[model]
    shapes = shapes_of(config)
    params = {k: jax.ShapeDtypeStruct(s, BF16) for k, s in shapes.items()}
    ids = jax.ShapeDtypeStruct((batch, seq), jnp.int32)

    def loss_and_grads(params, ids):
        return jax.value_and_grad(lambda p: _loss(forward, config, p, ids, impl))(params)

    def train_step(params, m, v, step, ids, lr=1e-4, b1=0.9, b2=0.999, eps=1e-8, wd=0.01):
        loss, grads = loss_and_grads(params, ids)
        step = step + 1
        c1, c2 = 1 - b1 ** step.astype(F32), 1 - b2 ** step.astype(F32)

        def update(p, g, m_, v_):
            p32, g32 = p.astype(F32), g.astype(F32)
            m32 = b1 * m_.astype(F32) + (1 - b1) * g32
            v32 = b2 * v_.astype(F32) + (1 - b2) * g32 * g32
            p32 = p32 * (1 - lr * wd) - lr * (m32 / c1) / (jnp.sqrt(v32 / c2) + eps)
            return p32.astype(p.dtype), m32.astype(m_.dtype), v32.astype(v_.dtype)
        out = jax.tree.map(update, params, grads, m, v)
        new_p = jax.tree.map(lambda t: t[0], out, is_leaf=lambda t: isinstance(t, tuple))
        new_m = jax.tree.map(lambda t: t[1], out, is_leaf=lambda t: isinstance(t, tuple))
        new_v = jax.tree.map(lambda t: t[2], out, is_leaf=lambda t: isinstance(t, tuple))
        return loss, new_p, new_m, new_v, step

    def prefill(params, ids):
        logits, kvs = forward(config, params, ids, impl)
        return logits, [(k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)) for k, v in kvs]

    n_kv = getattr(config, "kv_heads", None) or config.heads
    hd = config.hidden // config.heads

    def decode(params, cache, ids, position):
        logits, kvs = forward(config, params, ids, impl, cache=cache, position=position)
        return logits, kvs

    step = jax.ShapeDtypeStruct((), jnp.int32)
    return {
        "loss_and_grads": (loss_and_grads, (params, ids), ()),
        "train_step": (train_step, (params, params, params, step, ids), (0, 1, 2, 3)),
        "prefill": (prefill, (params, ids), ()),
        "decode": (decode, (params, [(jax.ShapeDtypeStruct((batch, seq, n_kv, hd), BF16),) * 2
                                     for _ in range(config.layers)],
                            jax.ShapeDtypeStruct((batch, 1), jnp.int32),
                            jax.ShapeDtypeStruct((), jnp.int32)), (1,)),
    }


def parameter_bytes(model: str, config) -> int:
    """Bytes of the model's parameters in bfloat16."""
    return 2 * sum(math.prod(s) for s in MODELS[model][1](config).values())
