"""The residency table: which tensors' memory is an XLA buffer of jax's own that a
compiled training step donates to each run (runtime/resident.py makes and renews the
entries). Other runtime code asks it so as not to hold such a buffer past a call
(dlpack.ArgumentImports: an import kept in a cache is a reference that makes PJRT refuse
the donation, and the step then copies).
"""

from __future__ import annotations

import weakref

import torch


class ResidencyTable:
    """tensor -> (the jax array its storage exports, that memory's address, the tensor's
    shape and strides then); an entry dies with its tensor, and with it the buffer.

    A dict keyed by ``id(t)`` holding a weak reference to ``t``: a training step looks up
    and renews one entry per written tensor at each call (BERT tiny: 126), and
    ``torch.utils.weak.WeakIdKeyDictionary`` builds a ``WeakIdRef`` per lookup (~1.4 us of
    lookup and renewal per tensor, against ~0.3 us here). A tensor whose weak reference
    reads None (a resurrected Python object) is simply not resident: its next step makes
    it resident again."""

    def __init__(self):
        self._entries: dict[int, list] = {}  # id -> [weakref, array, address, shape, strides]

    def get(self, t: torch.Tensor):
        e = self._entries.get(id(t))
        return e if e is not None and e[0]() is t else None

    def set(self, t: torch.Tensor, array, entry: list | None = None) -> list:
        """Record ``array`` as ``t``'s memory and return ``t``'s entry; ``entry``: ``t``'s
        current one (``get``), renewed in place."""
        if entry is None:
            key = id(t)
            ref = weakref.ref(t, lambda r, key=key: self._drop(key, r))
            entry = self._entries[key] = [ref, None, 0, None, None]
        entry[1:] = array, t.data_ptr(), t.shape, t.stride()
        return entry

    def _drop(self, key: int, ref) -> None:
        e = self._entries.get(key)
        if e is not None and e[0] is ref:
            del self._entries[key]

    def pop(self, t: torch.Tensor) -> None:
        if self.get(t) is not None:
            del self._entries[id(t)]

    def __contains__(self, t) -> bool:
        return self.get(t) is not None

    def __len__(self) -> int:
        return len(self._entries)


RESIDENT = ResidencyTable()
