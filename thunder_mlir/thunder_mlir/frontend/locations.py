"""Where code lives: thunder_mlir's own files, the libraries between the user and it, and
the user's line being traced.

thunder_mlir is one installed package, so its code is the files under ``PACKAGE_DIR``.
Frames in it, in torch, optree and contextlib are the machinery between the user's call and
the user's code (``INTERNAL_DIRS``): error messages name the first frame outside them, and
tracebacks hide them (``error_reporting``).
"""

from __future__ import annotations

import contextlib
import linecache
import os
import sys

import optree
import torch


def _directory(path: str) -> str:
    return os.path.dirname(os.path.abspath(path)) + os.sep


PACKAGE_DIR = os.path.dirname(_directory(__file__).rstrip(os.sep)) + os.sep
INTERNAL_DIRS = (PACKAGE_DIR, _directory(torch.__file__), _directory(optree.__file__),
                 os.path.abspath(contextlib.__file__))
# frozen standard-library modules and torch.fx's generated code: never the user's line
GENERATED = ("<frozen", "<eval_with_key>")
# torch's dispatch glue, between a library's call and thunder_mlir
_TORCH_GLUE = tuple(os.path.join(_directory(torch.__file__), n)
                    for n in ("overrides.py", "_tensor.py"))


def user_frame():
    """The innermost frame outside thunder_mlir and torch: the user's line being traced."""
    f = sys._getframe(1)
    while f is not None:
        fn = f.f_code.co_filename
        if not fn.startswith(INTERNAL_DIRS) and not fn.startswith(GENERATED):
            return f
        f = f.f_back
    return None


def library_frame():
    """The innermost frame outside thunder_mlir and torch's dispatch glue: the library line
    (e.g. in torch.nn) that made the call, when it is not the user's own."""
    f = sys._getframe(1)
    while f is not None:
        fn = f.f_code.co_filename
        if not fn.startswith(PACKAGE_DIR) and not fn.startswith(_TORCH_GLUE) \
                and not fn.startswith(GENERATED):
            return f
        f = f.f_back
    return None


def user_stacklevel() -> int:
    """``stacklevel`` for ``warnings.warn`` called by the caller of this function that
    attributes the warning to the user's frame (the first outside thunder_mlir/torch)."""
    f, level = sys._getframe(1), 1
    while f.f_back is not None and (f.f_code.co_filename.startswith(INTERNAL_DIRS)
                                    or f.f_code.co_filename.startswith(GENERATED)):
        f, level = f.f_back, level + 1
    return level


def describe_frame(f) -> str:
    """``file:line: source`` for error messages; ``file:line`` where the source is not
    available (a string given to ``exec``, ``python -c``; IPython cells are in linecache)."""
    if f is None:
        return "<unknown location>"
    src = linecache.getline(f.f_code.co_filename, f.f_lineno).strip()
    return f"{f.f_code.co_filename}:{f.f_lineno}: {src}" if src else \
        f"{f.f_code.co_filename}:{f.f_lineno}"


def user_error(cls: type[Exception], msg: str) -> Exception:
    """An exception of type ``cls`` whose message starts with the user's line being traced
    (eager's exception type, located)."""
    return cls(f"{describe_frame(user_frame())}\n  {msg}")
