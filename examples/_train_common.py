"""Shared helpers of the training examples: train a jitted model and an eager deep copy side
by side from the same initialization, compare losses and gradients, report residual bytes.

Definitions used in the report:

* loss error at a step: ``|loss_jit - loss_eager| / |loss_eager|`` (must be <= 1e-4);
* gradient error of a parameter: ``max |g_jit - g_eager| / max(max |g_eager|, 1e-12)``
  (the largest difference relative to the parameter's largest eager gradient); the
  check is the maximum over all parameters after the first backward (<= 1e-4). The plain
  max absolute difference is printed too.
* saved bytes: both sides run under ``torch.autograd.graph.saved_tensors_hooks`` for the
  first step; the bytes of the unique storages autograd saves for backward are summed,
  in total and excluding the model's parameters (which both keep alive anyway). For the
  jitted model these are exactly the residuals its forward plan saves; the static
  ``residual_bytes`` of the grad pass is printed as well.
"""

from __future__ import annotations

import copy
import os
import time

import torch

import thunder_mlir

LOSS_RTOL = 1e-4
GRAD_TOL = 1e-4


class SavedBytes:
    """Context manager summing the unique storages autograd saves for backward."""

    def __init__(self, params):
        self.param_ptrs = {p.untyped_storage().data_ptr() for p in params}
        self.storages: dict[int, int] = {}

    def _pack(self, t):
        if isinstance(t, torch.Tensor) and t.device.type != "meta":
            try:
                st = t.untyped_storage()
                self.storages[st.data_ptr()] = st.nbytes()
            except (RuntimeError, NotImplementedError):  # e.g. a tensor without storage
                self.storages[id(t)] = t.numel() * t.element_size()
        return t

    def __enter__(self):
        self._ctx = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc):
        self._ctx.__exit__(*exc)

    @property
    def total(self) -> int:
        """Bytes of every unique saved storage."""
        return sum(self.storages.values())

    @property
    def activations(self) -> int:
        """Bytes of the saved storages that are not parameters."""
        return sum(b for p, b in self.storages.items() if p not in self.param_ptrs)


def grad_error(jit_params, eager_params) -> tuple[float, float, str]:
    """(max relative-to-largest error, max abs difference, worst parameter name)."""
    worst, worst_abs, worst_name = 0.0, 0.0, ""
    for (name, p), q in zip(jit_params, eager_params):
        if q.grad is None and p.grad is None:
            continue
        if p.grad is None or q.grad is None:
            return float("inf"), float("inf"), name
        diff = (p.grad - q.grad).abs().max().item()
        rel = diff / max(q.grad.abs().max().item(), 1e-12)
        worst_abs = max(worst_abs, diff)
        if rel > worst:
            worst, worst_name = rel, name
    return worst, worst_abs, worst_name


def _mb(n: int) -> str:
    return f"{n / 2**20:7.2f} MiB"


def train_side_by_side(name: str, model: torch.nn.Module, batch: dict, steps: int = 20,
                       lr: float = 1e-3) -> int:
    """Train ``thunder_mlir.jit(model)`` and an eager deep copy for ``steps`` AdamW steps on
    ``batch`` (keyword arguments of the model; the output's ``.loss`` is minimized), print
    per-step losses, the gradient error, saved bytes and fallback ops; return 0 if every
    check passes, 1 otherwise."""
    eager = copy.deepcopy(model)
    model.train()
    eager.train()
    jm = thunder_mlir.jit(model)
    opt_j = torch.optim.AdamW(model.parameters(), lr=lr)
    opt_e = torch.optim.AdamW(eager.parameters(), lr=lr)
    ok = True
    print(f"== {name}: {sum(p.numel() for p in model.parameters()):,} parameters, "
          f"{steps} AdamW steps (lr {lr}), batch {tuple(batch['input_ids'].shape)}")
    print(f"{'step':>4} {'loss thunder':>14} {'loss eager':>14} {'rel err':>9} "
          f"{'grad err':>9} {'t thunder':>10} {'t eager':>9}")
    max_loss_err = max_grad_err = max_abs = 0.0
    step1_grad = None
    saved_j = saved_e = None
    for step in range(1, steps + 1):
        opt_j.zero_grad(set_to_none=True)
        opt_e.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        if step == 1:
            with SavedBytes(model.parameters()) as saved_j:
                loss_j = jm(**batch).loss
        else:
            loss_j = jm(**batch).loss
        loss_j.backward()
        opt_j.step()
        t_j = time.perf_counter() - t0
        t0 = time.perf_counter()
        if step == 1:
            with SavedBytes(eager.parameters()) as saved_e:
                loss_e = eager(**batch).loss
        else:
            loss_e = eager(**batch).loss
        loss_e.backward()
        t_e = time.perf_counter() - t0
        g_rel, g_abs, g_name = grad_error(list(model.named_parameters()),
                                          list(eager.parameters()))
        opt_e.step()
        lj, le = loss_j.item(), loss_e.item()
        rel = abs(lj - le) / abs(le)
        max_loss_err = max(max_loss_err, rel)
        max_grad_err, max_abs = max(max_grad_err, g_rel), max(max_abs, g_abs)
        if step == 1:
            step1_grad = (g_rel, g_abs, g_name)
        flag = "" if rel <= LOSS_RTOL else "  <-- loss FAIL"
        ok &= rel <= LOSS_RTOL
        print(f"{step:>4} {lj:14.8f} {le:14.8f} {rel:9.2e} {g_rel:9.2e} {t_j * 1e3:8.1f}ms "
              f"{t_e * 1e3:7.1f}ms{flag}")
    g_rel, g_abs, g_name = step1_grad
    grad_ok = g_rel <= GRAD_TOL
    ok &= grad_ok
    entry = jm._fn.last
    fb = thunder_mlir.fallback_ops(jm)
    print(f"loss: max relative error over {steps} steps {max_loss_err:.2e} "
          f"(<= {LOSS_RTOL:.0e}) {'OK' if max_loss_err <= LOSS_RTOL else 'FAIL'}")
    print(f"grads after step 1: max error relative to each parameter's largest gradient "
          f"{g_rel:.2e} (worst: {g_name}), max abs diff {g_abs:.2e} (<= {GRAD_TOL:.0e}) "
          f"{'OK' if grad_ok else 'FAIL'}; over all steps: {max_grad_err:.2e} / {max_abs:.2e}")
    print(f"saved for backward (step 1)      thunder_mlir   eager autograd")
    print(f"  all unique storages          {_mb(saved_j.total)}   {_mb(saved_e.total)}")
    print(f"  excluding parameters         {_mb(saved_j.activations)}   "
          f"{_mb(saved_e.activations)}   (thunder/eager {saved_j.activations / max(saved_e.activations, 1):.2f}x)")
    print(f"  grad pass residual_bytes     {_mb(entry.residual_bytes)}   "
          f"({entry.residual_bytes:,} bytes)")
    print(f"fallback ops: {fb if fb else 'none'}")
    print(f"compile stages: " + ", ".join(f"{s.name} {s.seconds:.2f}s"
                                          for s in thunder_mlir.last_traces(jm)))
    print(f"cache: {thunder_mlir.cache_misses(jm)} compile(s), {thunder_mlir.cache_hits(jm)} hits")
    print("RESULT:", "OK" if ok else "FAIL")
    return 0 if ok else 1


def setup() -> None:
    """Offline Hugging Face, quiet transformers logging, deterministic seed."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import transformers

    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
