"""Sharp edges wherever code lives (issue 13, area 3).

Code run from ``python -c``, stdin, the interactive REPL, an IPython cell or an ``exec``'d
string has a ``<...>`` filename. It gets the same guards, warnings and errors as code in a
file: a changed global re-traces (a fresh result, never a stale one) and
``random.random()`` warns that it was constant-folded. Messages name ``<string>:LINE``
where no source is available and show the source where linecache has it (IPython cells).
Each environment runs the same session: the real interpreter in a subprocess for
``python -c``, ``python -`` (stdin) and ``python -i`` (the REPL), in-process for ``exec``,
``code.InteractiveConsole`` and a simulated IPython cell.
"""

from __future__ import annotations

import code
import collections
import dataclasses
import linecache
import os
import re
import subprocess
import sys
import warnings

import pytest
import torch

from thunder_mlir.errors import SharpEdgeWarning
import thunder_mlir
from thunder_mlir import DataDependentControlFlowError
from thunder_mlir.frontend.sharp_edges import is_user_code

# One session: a guarded global changed between calls, then a non-functional call. Blank
# lines end each compound statement, so that the REPL reads the same text.
SESSION = """\
import random, warnings, torch, thunder_mlir
x = 5
def f(t):
    return t + x

jf = thunder_mlir.jit(f)
print("first", jf(torch.zeros(2)).tolist())
x = 6
print("second", jf(torch.zeros(2)).tolist())
print("misses", thunder_mlir.cache_misses(jf), thunder_mlir.cache_info(jf)["recompile_reasons"])
def g(t):
    return t + random.random()

with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    a = jg = thunder_mlir.jit(g)(torch.zeros(2))

print("warnings", len(w), "|".join(c.category.__name__ + ": " + str(c.message) for c in w))
"""
RANDOM_LINE = SESSION.splitlines().index("    return t + random.random()") + 1


def _check_session(out: str, filename: str, line: int) -> None:
    """The session's printed results: fresh values after the global changed, one
    SharpEdgeWarning naming ``filename:line``."""
    assert "first [5.0, 5.0]" in out, out
    # a stale program would print [5.0, 5.0] again: the global is a guard
    assert "second [6.0, 6.0]" in out, out
    assert "misses 2 [\"global 'x' changed: 5 -> 6\"]" in out, out
    m = re.search(r"warnings (\d+) (\w+): (.*)", out)
    assert m is not None and m.group(1) == "1", f"not one SharpEdgeWarning:\n{out}"
    assert m.group(2) == "SharpEdgeWarning"
    assert m.group(3).startswith(f"{filename}:{line}: random.random() is a non-functional "
                                 "call: its value at trace time was constant-folded"), m.group(2)


def _python(*argv: str, stdin: str | None = None) -> str:
    env = dict(os.environ, PYTHONWARNINGS="ignore::UserWarning:torch")
    r = subprocess.run([sys.executable, *argv], input=stdin, capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0, f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    return r.stdout


def test_python_dash_c():
    _check_session(_python("-c", SESSION), "<string>", RANDOM_LINE)


def test_stdin_script():
    _check_session(_python("-", stdin=SESSION), "<stdin>", RANDOM_LINE)


def test_interactive_repl():
    """``python -i`` reading the session from a pipe: the interactive loop compiles each
    statement on its own (filename ``<stdin>``, lines counted per statement)."""
    out = _python("-i", stdin=SESSION)
    _check_session(out, "<stdin>", 2)  # line 2 of the ``def g`` statement


def test_exec_of_a_string():
    ns: dict = {"__name__": "__main__"}
    with _captured_stdout() as lines:
        exec(compile(SESSION, "<string>", "exec"), ns)  # noqa: S102 - the test's own code
    _check_session("\n".join(lines), "<string>", RANDOM_LINE)


def test_code_interactive_console():
    console = code.InteractiveConsole({"__name__": "__console__"})
    with _captured_stdout() as lines:
        for line in SESSION.splitlines():
            console.push(line)
        console.push("")
    _check_session("\n".join(lines), "<console>", 2)


def test_simulated_ipython_cell():
    """IPython compiles each cell under a name it registers in linecache
    (``<ipython-input-N-hash>``); the warning names the cell's line."""
    name = "<ipython-input-1-0123456789ab>"
    linecache.cache[name] = (len(SESSION), None, SESSION.splitlines(True), name)
    try:
        with _captured_stdout() as lines:
            exec(compile(SESSION, name, "exec"), {"__name__": "__main__"})  # noqa: S102
    finally:
        linecache.cache.pop(name, None)
    _check_session("\n".join(lines), name, RANDOM_LINE)


class _captured_stdout:
    """Collect ``print`` output of code run in-process (capsys would also do; this keeps
    the session's text apart from pytest's)."""

    def __enter__(self):
        import io

        self._old, self._buf = sys.stdout, io.StringIO()
        sys.stdout = self._buf
        self.lines: list[str] = []
        return self.lines

    def __exit__(self, *exc):
        sys.stdout = self._old
        self.lines.extend(self._buf.getvalue().splitlines())
        return False


# ------------------------------------------------------------- errors and locations
DATA_DEPENDENT = """\
import torch, thunder_mlir
def f(x):
    if x.numpy().sum() > 0:
        return x
    return -x

jf = thunder_mlir.jit(f)
"""


def test_exec_string_error_names_string_line_without_source():
    ns: dict = {"__name__": "__main__"}
    exec(compile(DATA_DEPENDENT, "<string>", "exec"), ns)  # noqa: S102
    with pytest.raises(DataDependentControlFlowError) as e:
        ns["jf"](torch.ones(2))
    assert str(e.value).splitlines()[0] == "<string>:3"  # no source: no ': ...' after it
    assert "tensor.numpy() needs the tensor's data" in str(e.value)


def test_ipython_cell_error_shows_the_cells_source_line():
    name = "<ipython-input-7-feedfacecafe>"
    linecache.cache[name] = (len(DATA_DEPENDENT), None, DATA_DEPENDENT.splitlines(True), name)
    try:
        ns: dict = {"__name__": "__main__"}
        exec(compile(DATA_DEPENDENT, name, "exec"), ns)  # noqa: S102
        with pytest.raises(DataDependentControlFlowError) as e:
            ns["jf"](torch.ones(2))
    finally:
        linecache.cache.pop(name, None)
    assert str(e.value).splitlines()[0] == f"{name}:3: if x.numpy().sum() > 0:"


def test_python_dash_c_error_traceback_is_the_users():
    """An uncaught error in ``python -c``: the traceback shows only ``<string>`` frames,
    and the message starts with ``<string>:LINE``."""
    src = DATA_DEPENDENT + "jf(torch.ones(2))\n"
    r = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1
    frames = re.findall(r'^  File "([^"]+)"', r.stderr, flags=re.M)
    assert frames == ["<string>", "<string>"], r.stderr
    assert "DataDependentControlFlowError: <string>:3\n" in r.stderr, r.stderr


def test_tensor_global_read_in_exec_string_is_named():
    src = "import torch\nW = torch.ones(2)\ndef f(a):\n    return a * W\n"
    ns: dict = {"__name__": "__main__"}
    exec(compile(src, "<string>", "exec"), ns)  # noqa: S102
    with pytest.raises(thunder_mlir.SharpEdgeError) as e:
        thunder_mlir.jit(ns["f"])(torch.ones(2))
    assert str(e.value).startswith("<string>:4\n  the global 'W', a tensor of shape (2,)")


def test_global_write_in_exec_string_is_reported_and_undone():
    src = "N = 0\ndef f(a):\n    global N\n    N = N + 1\n    return a\n"
    ns: dict = {"__name__": "__main__"}
    exec(compile(src, "<string>", "exec"), ns)  # noqa: S102
    with pytest.raises(thunder_mlir.SharpEdgeError) as e:
        thunder_mlir.jit(ns["f"])(torch.ones(2))
    assert str(e.value).startswith("<string>:4: the program assigns global 'N'.")
    assert ns["N"] == 0


# ------------------------------------------------- what is *not* the user's code
def test_frozen_modules_are_not_user_code():
    c = compile("def h():\n    return 1\n", "<frozen importlib._bootstrap>", "exec")
    assert not is_user_code(c.co_consts[0], {"__name__": "importlib._bootstrap"})


def test_generated_code_is_not_user_code():
    import torch.fx
    import transformers.modeling_outputs as mo

    gm = torch.fx.symbolic_trace(lambda x: x + 1)
    assert gm.forward.__code__.co_filename.startswith("<eval_with_key>")
    assert not is_user_code(gm.forward.__code__, gm.forward.__globals__)
    # dataclasses' and namedtuple's generated methods (filename <string>)
    init = mo.BaseModelOutput.__init__
    assert init.__code__.co_filename == "<string>"
    assert not is_user_code(init.__code__, init.__globals__)

    @dataclasses.dataclass
    class Local:
        a: int = 1
    assert not is_user_code(Local.__init__.__code__, Local.__init__.__globals__)
    Pair = collections.namedtuple("Pair", "a b")
    assert not is_user_code(Pair.__new__.__code__, Pair.__new__.__globals__)


def test_user_strings_are_user_code():
    for name in ("<string>", "<stdin>", "<console>", "<ipython-input-3-abc>", "<pyshell#4>"):
        c = compile("def h():\n    return 1\n", name, "exec").co_consts[0]
        assert is_user_code(c, {"__name__": "__main__"}), name
        c = compile("def h():\n    return 1\n", name, "exec").co_consts[0]
        assert is_user_code(c, {}), name  # exec(src, {}): a namespace of the user's own


def test_library_strings_are_not_user_code():
    """A library that execs code in its own namespace (here: torch's) is not the user."""
    c = compile("def lib_h():\n    return 2\n", "<string>", "exec").co_consts[0]
    assert not is_user_code(c, vars(torch.nn.functional))


def test_warning_in_generated_dataclass_init_is_not_reported():
    """A dataclass constructed inside the program: its generated ``__init__`` (filename
    ``<string>``) reads no guards and reports nothing."""
    @dataclasses.dataclass
    class Out:
        y: torch.Tensor
        scale: float = 2.0

    def f(t):
        return Out(t * 3).y

    jf = thunder_mlir.jit(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SharpEdgeWarning)
        torch.testing.assert_close(jf(torch.ones(2)), f(torch.ones(2)))
    # the class itself is guarded by identity (a closure cell); its generated __init__
    # reads nothing that is guarded
    assert thunder_mlir.cache_info(jf)["guards"] == ["cell 'Out'"]
