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


# ------------------------------------------------------------------ library code
_LIBRARY_ROOTS: tuple[tuple[str, ...], tuple[str, ...]] | None = None  # (sys.path, roots)
_SITE_DIR_NAMES = ("site-packages", "dist-packages")


def _pth_paths(site_dir: str) -> list[str]:
    """The directories the ``.pth`` files of ``site_dir`` add to ``sys.path`` (their lines
    that are not comments nor ``import`` statements, relative to ``site_dir``), as
    ``site.addpackage`` reads them."""
    out = []
    try:
        names = sorted(n for n in os.listdir(site_dir) if n.endswith(".pth"))
    except OSError:
        return out
    for name in names:
        try:
            with open(os.path.join(site_dir, name), encoding="utf-8") as f:
                lines = f.read().splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        for line in lines:
            line = line.strip()
            if not line or line.startswith(("#", "import ", "import\t")):
                continue
            path = os.path.join(site_dir, line)
            if os.path.isdir(path):
                out.append(path)
    return out


def _editable_root(dist) -> str | None:
    """The project directory of an editable install (``pip install -e``): the
    ``dir_info.editable`` URL of its ``direct_url.json`` (PEP 610), else None."""
    import json
    from urllib.parse import unquote, urlparse

    try:
        info = json.loads(dist.read_text("direct_url.json") or "null")
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or not (info.get("dir_info") or {}).get("editable"):
        return None
    url = urlparse(info.get("url", ""))
    return unquote(url.path) if url.scheme == "file" and url.path else None


def _user_anchor() -> str:
    """Where the user's program lives: the ``__main__`` script's file, or, where
    ``__main__`` has no file of the user's (``python -c``, the REPL, IPython, ``python -m
    pytest`` and console scripts: a library's ``__main__``, in the standard library, a
    site directory or the interpreter's scripts directory), the working directory."""
    import sysconfig

    main = getattr(sys.modules.get("__main__"), "__file__", None)
    if isinstance(main, str) and main:
        main = os.path.realpath(main)
        std = [os.path.realpath(p) + os.sep for k, p in sysconfig.get_paths().items()
               if k in ("stdlib", "platstdlib", "purelib", "platlib", "scripts")]
        if not main.startswith(tuple(std)) and \
                os.sep + _SITE_DIR_NAMES[0] + os.sep not in main and \
                os.sep + _SITE_DIR_NAMES[1] + os.sep not in main:
            return main
    try:
        return os.path.realpath(os.getcwd()) + os.sep
    except OSError:
        return os.sep


def _inside(path: str, root: str) -> bool:
    root = root.rstrip(os.sep) + os.sep
    return path == root.rstrip(os.sep) or path.startswith(root)


def library_roots() -> tuple[str, ...]:
    """The directories whose files are library code, never the user's (each ends with
    ``os.sep``; a file is library code when its absolute path starts with one). Used by the
    sharp-edge monitor (``sharp_edges.is_user_code``): a library's writes to its own
    globals (torch/utils/_device.py's ``CURRENT_DEVICE``) are not the user's program.

    The rule: library code is code installed for the interpreter, wherever it is installed
    (issue 28), unless it is the project of the user's own program:

    1. the interpreter's ``sysconfig`` paths (stdlib, platstdlib, purelib, platlib);
    2. ``site.getsitepackages()`` and ``site.getusersitepackages()`` (``pip install
       --user``, with ``PYTHONUSERBASE``);
    3. every ``sys.path`` entry named ``site-packages`` or ``dist-packages`` (Debian's,
       another environment's reached through ``PYTHONPATH``);
    4. the directories the ``.pth`` files of those site directories add to ``sys.path``
       (a library installed in another site directory, setuptools' and hatchling's
       editable installs);
    5. per installed distribution (``importlib.metadata.distributions()``, which searches
       ``sys.path``): the directory holding its metadata (``*.dist-info``, ``*.egg-info``:
       ``pip install --target``, a ``PYTHONPATH`` directory of installed packages) and,
       for an editable install (``pip install -e``), its project directory named by
       ``direct_url.json`` (PEP 610);
    6. torch's and thunder_mlir's package directories (each directory of its ``__path__``:
       a source checkout's layer roots), always.

    The user's own project stays user code: a root of 4 or 5 is dropped when it holds
    the user's program (``_user_anchor``: the ``__main__`` script, else the working
    directory), or lies inside the project directory of an editable install that holds it
    (``pip install -e .`` of the project whose script or tests are running). So a library
    checkout installed with ``pip install -e`` is library code, except while the program
    being run is inside that checkout (then its frames are watched as the user's).

    Cached on ``sys.path`` (recomputed when it changes); each root is given as written and
    resolved (symlinks), so a file imported through either path matches."""
    global _LIBRARY_ROOTS
    key = tuple(sys.path)
    cached = _LIBRARY_ROOTS
    if cached is not None and cached[0] == key:
        return cached[1]
    import site
    import sysconfig

    fixed = [p for k, p in sysconfig.get_paths().items()
             if k in ("stdlib", "platstdlib", "purelib", "platlib")]
    sites = list(getattr(site, "getsitepackages", lambda: [])())
    user_site = getattr(site, "getusersitepackages", lambda: None)()
    if isinstance(user_site, str):
        sites.append(user_site)
    sites += [p for p in sys.path if p and os.path.basename(p.rstrip(os.sep)) in _SITE_DIR_NAMES]
    fixed += sites
    fixed += [PACKAGE_DIR, _directory(torch.__file__)]
    # (a source checkout adds each layer's root to the package's __path__: dialects/,
    # passes/, tools/; tests/test_editable_install.py)
    fixed += [p for p in getattr(sys.modules.get("thunder_mlir"), "__path__", ())]
    candidates = [q for s in dict.fromkeys(sites) for q in _pth_paths(s)]
    anchor = _user_anchor()
    own_projects = []
    try:
        from importlib import metadata

        for dist in metadata.distributions():
            located = getattr(dist, "_path", None)  # PathDistribution's metadata directory
            if located is not None:
                candidates.append(os.path.dirname(os.path.abspath(str(located))))
            root = _editable_root(dist)
            if root is not None:
                if _inside(anchor, os.path.realpath(root)):
                    own_projects.append(os.path.realpath(root))
                else:
                    candidates.append(root)
    except Exception:  # noqa: BLE001 - a broken distribution: the other rules still hold
        pass
    roots = []
    for p in fixed:
        roots += [os.path.abspath(p), os.path.realpath(p)]
    for p in candidates:
        real = os.path.realpath(p)
        if _inside(anchor, real) or any(_inside(real, o) for o in own_projects):
            continue
        roots += [os.path.abspath(p), real]
    out = tuple(dict.fromkeys(r.rstrip(os.sep) + os.sep for r in roots if r))
    _LIBRARY_ROOTS = (key, out)
    return out
