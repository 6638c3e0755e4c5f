"""Eager's device rule for 0-d CPU tensors beside another device's tensors
(frontend/cpu_scalars.py), checked on the CPU: meta tensors stand in for a GPU's, and the
programs are traced, not run (tests/test_cuda.py runs them on a GPU)."""

from __future__ import annotations

import pytest
import torch

from thunder_mlir.errors import UnsupportedInputError
from thunder_mlir.function import _flatten_inputs
from thunder_mlir.pipeline import trace_function

GPU = "meta"  # a device other than the CPU that needs no hardware


def _trace(fn, *args):
    leaves, spec, *_ = _flatten_inputs(args, {})
    return trace_function(fn, leaves, spec)


class _Layer:
    """transformers' StaticLayer's start: ``cumulative_length = torch.tensor(0)``."""

    def __init__(self):
        self.n = torch.tensor(0)


def test_a_cpu_scalar_beside_a_gpu_tensor_is_accepted():
    x, s = torch.empty(2, 3, device=GPU), torch.tensor(2.0)
    trace, _, outs, _ = _trace(lambda x, s: x * s + s, x, s)
    assert trace.device.type == GPU and outs[0].device.type == GPU


def test_a_result_of_cpu_scalars_alone_is_refused_as_an_output():
    """Eager returns ``s * 3`` on the CPU; the program would return it on the GPU."""
    x, s = torch.empty(2, 3, device=GPU), torch.tensor(2.0)
    with pytest.raises(UnsupportedInputError, match="output 1 is computed only from 0-d CPU"):
        _trace(lambda x, s: (x * 2, s * 3), x, s)


def test_to_the_program_device_is_eager_copy():
    x, s = torch.empty(2, 3, device=GPU), torch.tensor(2.0)
    _trace(lambda x, s: s.to(x.device) + 1, x, s)
    _trace(lambda x, s: s.to(GPU) * 2, x, s)


def test_in_place_write_to_a_cpu_scalar_is_a_write_back():
    x, s = torch.empty(2, 3, device=GPU), torch.tensor(2.0)

    def f(x, s):
        s += 1
        return x + s

    trace, *_ = _trace(f, x, s)
    assert list(trace.mutated_inputs) == [1]


def test_static_layer_moves_its_counter_to_the_keys_device():
    def first_update(x, layer):
        layer.n = layer.n.to(x.device)
        layer.n += x.shape[0]
        return x + layer.n

    _trace(first_update, torch.empty(2, 3, device=GPU), _Layer())


def test_a_cpu_counter_stored_back_on_the_object_is_refused():
    def f(x, layer):
        layer.n = layer.n + 1
        return x * 2

    with pytest.raises(UnsupportedInputError, match="stored on an input object"):
        _trace(f, torch.empty(2, 3, device=GPU), _Layer())


def test_tensors_with_dimensions_on_two_devices_are_refused():
    with pytest.raises(UnsupportedInputError, match="several devices"):
        _trace(lambda x, y: x + y, torch.empty(2, device=GPU), torch.ones(2))


def test_cpu_programs_are_unchanged():
    """All tensors on the CPU: no value is tracked (the rule only applies beside a GPU)."""
    trace, *_ = _trace(lambda x, s: s * 3, torch.ones(2), torch.tensor(2.0))
    assert trace.device.type == "cpu" and not trace.cpu_scalars
