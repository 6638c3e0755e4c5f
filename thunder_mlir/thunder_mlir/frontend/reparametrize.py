"""A module tree's parameters and buffers replaced by other tensors for the duration of a
call (the program's inputs while a forward is traced), each restored afterwards.

torch's reparametrization (``torch.func.functional_call``,
``torch.nn.utils.stateless._reparametrize_module``) swaps the given qualified names one by
one and afterwards puts back, name by name in the same order, what each swap found. A
submodule reachable under two names (``self.word_embeddings = base.embed_tokens``, as
peft's prompt-learning models hold the base model's embedding; or two tied names that
``tie_weights=True`` fills in) has one slot behind both names: the second swap finds the
first one's substitute, and the restore leaves that substitute in the slot after the call
(torch 2.13, eager too). Under thunder_mlir it is a TensorProxy of the finished trace,
which the module then holds as its parameter (issue 48). ``reparametrized`` gives each
slot — (owning module, attribute name) — one substitute, so each is swapped and restored
exactly once.
"""

from __future__ import annotations

import contextlib

import torch
from torch.nn.utils.stateless import _reparametrize_module, _untie_named_tensors_map


def one_name_per_slot(module: torch.nn.Module, values: dict) -> dict:
    """A new dict: ``values`` ({qualified name: tensor}) without the names that reach the
    same slot — the same attribute of the same submodule object — as a later name (the
    last name swapped is the value the slot holds during torch's own reparametrization).
    Names whose owning submodule does not exist are kept (torch's ``strict=False`` sets
    them as attributes)."""
    owners = dict(module.named_modules(remove_duplicate=False))
    slots: dict = {}
    for name in values:
        prefix, _, attr = name.rpartition(".")
        owner = owners.get(prefix)
        slots[(id(owner) if owner is not None else prefix, attr)] = name
    kept = set(slots.values())
    return {n: v for n, v in values.items() if n in kept}


@contextlib.contextmanager
def reparametrized(module: torch.nn.Module, values: dict, *, tie_weights: bool = False):
    """Within the block, ``module``'s parameters and buffers named in ``values``
    ({qualified name, as ``named_parameters(remove_duplicate=False)``: tensor}) are those
    tensors; after it (also on an exception) each slot holds what it held before. Names
    not in ``values`` keep their tensors (``strict=False``). ``tie_weights``: as
    ``torch.func.functional_call``'s, a value given for one of several names of one tensor
    (tied weights) is used for all of them; raises ValueError for different values given
    to tied names. Several names of one slot (a submodule reachable under two names) are
    swapped once, with the last name's value (module docstring). ``values`` is not
    written (torch's reparametrization writes the tensors found after the call back into
    the dict it is given: here a copy)."""
    if tie_weights:
        values = _untie_named_tensors_map(module, values)
    with _reparametrize_module(module, one_name_per_slot(module, values), tie_weights=False,
                               strict=False):
        yield
