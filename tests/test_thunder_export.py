"""Tests of ``thunder-export`` (tools/thunder_mlir/tools/thunder_export.py): its ``main``
run in this process (as test_thunder_opt runs thunder-opt's), the artifacts it writes
compared with eager PyTorch, and its errors."""

from __future__ import annotations

import contextlib
import io
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import thunder_mlir
from thunder_mlir.tools.thunder_export import main as thunder_export_main

PROGRAMS = textwrap.dedent("""
    import torch

    class TinyNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.fc = torch.nn.Linear(8, 4)
            self.norm = torch.nn.BatchNorm1d(4)

        def forward(self, x):
            return torch.relu(self.norm(self.fc(x))).sum(-1)

    def make_net():
        return TinyNet().eval()

    def add(a, b, alpha=1.0):
        return a + alpha * b

    def branchy(x):
        if x.sum() > 0:
            return x
        return -x
""")


@pytest.fixture
def programs(tmp_path: Path) -> Path:
    path = tmp_path / "programs.py"
    path.write_text(PROGRAMS)
    return path


def run(*argv: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``thunder-export ARGV`` run in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = thunder_export_main(list(argv))
        except SystemExit as e:  # argparse's usage errors
            code = e.code if isinstance(e.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def _load(path: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("programs_eager", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_module_factory_dynamic_and_weights(programs: Path, tmp_path: Path):
    """``FILE.py:make_net()`` with a dynamic batch (weights as constants), and the module
    class with ``--weights arguments`` (weights to FILE.weights.npz): both deserialized
    and called against eager."""
    out = tmp_path / "net.bin"
    code, stdout, err = run(f"{programs}:make_net()", "--input", "batch=3x8",
                            "-o", str(out))
    assert code == 0, err
    assert "inputs:  args[0]" in stdout and "batch" in stdout
    eager = _load(programs).make_net()
    exp = thunder_mlir.deserialize(out.read_bytes())
    assert exp.dims == {"batch": (2, None)}
    x = torch.randn(5, 8)
    with torch.no_grad():
        torch.testing.assert_close(exp(x), eager(x))
    out2 = tmp_path / "net_args.bin"
    code, stdout, err = run(f"{programs}:TinyNet", "--eval", "--input", "3x8",
                            "--weights", "arguments", "-o", str(out2))
    assert code == 0, err
    exp2 = thunder_mlir.deserialize(out2.read_bytes())
    weights = np.load(str(out2) + ".weights.npz")
    assert set(weights.files) == set(exp2.input_names[:-1])
    exp2.weights = {n: torch.from_numpy(weights[n]) for n in weights.files}
    x = torch.randn(3, 8)
    with torch.no_grad():
        torch.testing.assert_close(exp2(x), eager(x))


def test_function_kwargs_and_text(programs: Path):
    code, stdout, err = run(f"{programs}:add", "--input", "3x8:float64", "--input",
                            "8:float64", "--kwarg", "alpha=2.5", "--mlir", "-")
    assert code == 0, err
    assert "func.func public @main(%arg0: tensor<3x8xf64>" in stdout
    assert "inputs:  args[0], args[1]" in err  # (the summary leaves stdout to the text)


@pytest.mark.parametrize("argv, code, needle", [
    (["{p}:add", "--input", "3xq"], 2, "NAME=SIZE"),
    (["{p}:add", "--input", "3:float33"], 2, "unknown dtype 'float33'"),
    (["{p}:missing", "--input", "3"], 2, "has no attribute 'missing'"),
    (["no_such_module_xyz:f"], 2, "cannot import"),
    (["{p}:add", "--input", "3", "--input", "3", "--kwarg", "alpha"], 2, "NAME=VALUE"),
    (["{p}:branchy", "--input", "3"], 1, "programs.py"),  # the jit's error, the user's line
])
def test_errors(programs: Path, argv, code, needle):
    got, _, err = run(*[a.format(p=programs) for a in argv])
    assert got == code, err
    assert "thunder-export: error:" in err and needle in err, err
    assert "Traceback" not in err
