"""CPU scalars: 0-d CPU tensors passed beside the tensors of one GPU.

Eager PyTorch accepts a 0-d CPU tensor as an operand of an op on CUDA tensors (ATen's
``TensorIteratorBase::compute_types``: a CPU scalar does not decide the common device), and
libraries rely on it. transformers' ``StaticLayer`` starts ``cumulative_length =
torch.tensor(0)`` on the CPU and moves it to the keys' device at its first update, so the
first decode step of every static-cache ``generate`` passes one beside CUDA tensors.

The rule here:

* **Device of the program.** The devices of the tensor inputs, CPU scalars left out when
  another device is present; more than one device left raises ``UnsupportedInputError``
  (``program_device``). The runtime copies a CPU scalar to the program's GPU at the call
  (``runtime/dlpack.to_xla``: a host-to-device copy of 1 element).
* **Values that eager keeps on the CPU.** In eager, a result whose tensor operands are all
  CPU scalars is a CPU tensor. The trace computes it on the program's device, so such
  values are tracked (``Trace.cpu_scalars``, by proxy identity): a CPU scalar input, and
  each result of an op whose tensor operands are all tracked (``propagate``, called by the
  tracer's dispatch for every op). ``.to(device)`` of the program's device returns an
  untracked proxy of the same value, as eager's copy to the GPU.
  A tracked value that leaves the program as a returned tensor or a tensor stored on an
  input object raises ``UnsupportedInputError`` (``check_outputs``): eager would return it
  on the CPU. A CPU scalar input written in place is written back into the caller's CPU
  tensor (``copy_``), as eager writes it.
* Inside the program a tracked value's ``.device`` reads as the program's device (the proxy's
  metadata); eager reads ``cpu``. Tests: tests/test_cuda.py (on a GPU) and
  tests/test_compat.py (the rule, on meta tensors standing in for a GPU's).
"""

from __future__ import annotations

import optree
import torch

from thunder_mlir.errors import UnsupportedInputError
from thunder_mlir.ir.proxy import TensorProxy


def is_cpu_scalar(t: torch.Tensor) -> bool:
    """Whether ``t`` is a 0-d tensor on the CPU."""
    return t.dim() == 0 and t.device.type == "cpu"


def program_device(tensors) -> tuple[torch.device, list[int]]:
    """The device a program with these tensor inputs runs on, and the positions (in
    ``tensors``) of the CPU scalars beside another device's tensors.

    Raises ``UnsupportedInputError`` naming the devices when tensors other than CPU scalars
    are on more than one device."""
    devices = {t.device for t in tensors}
    if len(devices) <= 1:
        return (devices.pop() if devices else torch.device("cpu")), []
    others = {t.device for t in tensors if not is_cpu_scalar(t)}
    if len(others) == 1:
        return others.pop(), [i for i, t in enumerate(tensors) if is_cpu_scalar(t)]
    raise UnsupportedInputError(
        f"inputs are on several devices {sorted(map(str, devices))}; thunder_mlir compiles a "
        "program for one device (0-d CPU tensors may sit beside one GPU's tensors, as eager "
        "allows). Move the inputs to one device before the call.")


def propagate(trace, args, kwargs, out):
    """``out``, the results of one op, with eager's device rule for CPU scalars applied.

    A call that names a device (``.to("cuda")``, ``.to(x.device)``, a factory's ``device=``)
    of the program's device type returns a tracked value as an untracked proxy of the same
    SSA value (eager copies it to the GPU); otherwise, when the op's tensor operands (in
    ``args``, ``kwargs``) are all tracked, its tensor results are tracked."""
    tracked = trace.cpu_scalars
    leaves = optree.tree_leaves((args, kwargs), none_is_leaf=True)
    devices = [torch.device(x) for x in leaves
               if isinstance(x, torch.device) or (type(x) is str and _names_device(x))]
    if devices:
        if id(out) in tracked and devices[-1].type == trace.device.type:
            return TensorProxy(out.value, out.tshape, out.tdtype, trace.device,
                               out.requires_grad)
        return out
    operands = [x for x in leaves if isinstance(x, torch.Tensor)]
    if operands and all(id(x) in tracked for x in operands):
        for x in optree.tree_leaves(out, none_is_leaf=True):
            if isinstance(x, torch.Tensor):
                track(trace, x)
    return out


def _names_device(s: str) -> bool:
    try:
        torch.device(s)
    except RuntimeError:
        return False
    return True


def track(trace, proxy) -> None:
    """Mark ``proxy`` as a value eager keeps on the CPU (kept alive with the trace, so its
    identity is not reused)."""
    trace.cpu_scalars[id(proxy)] = proxy


def check_outputs(trace, named) -> None:
    """Raise ``UnsupportedInputError`` if a tracked value leaves the program.

    ``named``: (description, proxy) pairs of the program's outputs (returned tensors and
    tensors stored on input objects)."""
    if not trace.cpu_scalars:
        return
    for what, p in named:
        if id(p) in trace.cpu_scalars:
            raise UnsupportedInputError(
                f"{what} is computed only from 0-d CPU tensors, so eager returns it on the "
                f"CPU, while this program runs on {trace.device}. Move those tensors to "
                f"{trace.device} before the call, or return .to('{trace.device}') of it.")
