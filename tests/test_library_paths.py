"""Library code is found by where it is installed (issue 28, part 3;
``frontend/locations.library_roots``): a library that writes its own module globals
(as torch/utils/_device.py writes ``CURRENT_DEVICE``) compiles without a sharp-edge
error wherever it is installed, while the same write in the user's own code is still a
``SharpEdgeError``.

One subprocess holds every layout (each subprocess imports torch: ~4 s): torch itself
imported through ``PYTHONPATH`` from a directory that is no site directory (the issue's
``torch/utils/_device.py:10: the program assigns global 'CURRENT_DEVICE'``), libraries in a
directory a ``.pth`` file of another site directory adds (through a symlink), on
``PYTHONPATH`` (a ``site-packages`` directory and a ``pip install --target`` directory
with its ``.dist-info``), in the user site (``pip install --user``, ``PYTHONUSERBASE``), an
editable source checkout (a ``direct_url.json`` marked editable and an ``__editable__``
``.pth``), and a Hugging Face model whose ``transformers`` is imported from a
``PYTHONPATH`` site directory. The user's script lives in its own editable project,
whose module writing a global must stay the user's code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

LIB = textwrap.dedent("""
    CURRENT = None


    def scale(x):
        global CURRENT  # as torch.utils._device does with CURRENT_DEVICE
        CURRENT = x.shape
        return x * 2
""")

MAIN = textwrap.dedent("""
    import os, site, sys
    import torch
    import thunder_mlir
    from thunder_mlir.errors import SharpEdgeError

    site.addsitedir(os.environ["OTHER_SITE"])  # a site directory whose .pth adds a library
    site.addsitedir(os.environ["EDITABLE_SITE"])  # editable installs (a library's, ours)
    sys.path.append(site.getusersitepackages())  # pip install --user (a venv skips it)

    import lib_pth, lib_pythonpath, lib_target, lib_user, lib_editable, own_module

    x = torch.randn(2, 3)
    for m in (lib_pth, lib_pythonpath, lib_target, lib_user, lib_editable):
        def mlp(x, m=m):
            return torch.tanh(m.scale(x)) + 1

        try:
            got = thunder_mlir.jit(mlp)(x)
        except SharpEdgeError as e:
            print(f"LIBRARY-REFUSED {m.__name__}: {e}".replace(chr(10), " "))
            continue
        torch.testing.assert_close(got, torch.tanh(x * 2) + 1)
        print(f"LIBRARY-OK {m.__name__} {m.__file__}")

    def device_block(x):  # torch.device's context writes torch.utils._device.CURRENT_DEVICE
        with torch.device(x.device):
            return x + torch.ones(3)


    try:
        torch.testing.assert_close(thunder_mlir.jit(device_block)(x), x + 1)
        print(f"TORCH-OK {torch.__file__}")
    except SharpEdgeError as e:
        print(f"TORCH-REFUSED: {e}".replace(chr(10), " "))

    G = 0


    def own(x):
        global G
        G = 1
        return x + 1


    def own_project(x):
        return own_module.scale(x) + 1


    for f in (own, own_project):
        try:
            thunder_mlir.jit(f)(x)
            print(f"USER-MISSED {f.__name__}")
        except SharpEdgeError as e:
            print(f"USER-REFUSED {f.__name__}: {e}".replace(chr(10), " "))

    if os.environ.get("HF"):
        import transformers

        cfg = transformers.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                                      num_attention_heads=2, intermediate_size=32,
                                      max_position_embeddings=16)
        torch.manual_seed(0)
        model = transformers.BertModel(cfg).eval()
        ids = torch.randint(0, 50, (1, 6))
        with torch.no_grad():
            got = thunder_mlir.jit(model)(ids).last_hidden_state
            torch.testing.assert_close(got, model(ids).last_hidden_state)
        print(f"HF-OK {transformers.__file__}")
""")


def _write(path, text=""):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def _dist_info(site_dir, name, direct_url=None):
    d = os.path.join(site_dir, f"{name}-0.1.dist-info")
    _write(os.path.join(d, "METADATA"), f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    if direct_url is not None:
        _write(os.path.join(d, "direct_url.json"), json.dumps(direct_url))


def _layouts(tmp):
    """The directory tree of every layout; returns (the user's script, its environment)."""
    py = f"python{sys.version_info.major}.{sys.version_info.minor}"
    # another site directory with a .pth naming a directory that holds a symlink to the
    # library's source (no metadata, not named site-packages)
    other_site = os.path.join(tmp, "other", "lib", py, "site-packages")
    _write(os.path.join(tmp, "src_pth", "__init__.py"), LIB)
    os.makedirs(os.path.join(tmp, "elsewhere", "libs"))
    os.symlink(os.path.join(tmp, "src_pth"), os.path.join(tmp, "elsewhere", "libs", "lib_pth"))
    _write(os.path.join(other_site, "extra.pth"), os.path.join(tmp, "elsewhere", "libs") + "\n")
    # PYTHONPATH: another environment's site-packages; a pip install --target directory
    pp_site = os.path.join(tmp, "cluster", "lib", py, "site-packages")
    _write(os.path.join(pp_site, "lib_pythonpath.py"), LIB)
    target = os.path.join(tmp, "target")
    _write(os.path.join(target, "lib_target", "__init__.py"), LIB)
    _dist_info(target, "lib_target")
    # pip install --user
    userbase = os.path.join(tmp, "userbase")
    _write(os.path.join(userbase, "lib", py, "site-packages", "lib_user.py"), LIB)
    # editable installs: a library's source checkout, and the user's own project (which
    # holds the script), each with its direct_url.json and __editable__ .pth
    editable_site = os.path.join(tmp, "venv", "lib", py, "site-packages")
    checkout, project = os.path.join(tmp, "checkout"), os.path.join(tmp, "project")
    _write(os.path.join(checkout, "src", "lib_editable", "__init__.py"), LIB)
    _write(os.path.join(checkout, "pyproject.toml"))
    _write(os.path.join(project, "src", "own_module.py"), LIB)
    _write(os.path.join(project, "pyproject.toml"))
    for name, root in (("lib_editable", checkout), ("own_project", project)):
        _dist_info(editable_site, name, {"url": f"file://{root}",
                                         "dir_info": {"editable": True}})
        _write(os.path.join(editable_site, f"__editable__.{name}-0.1.pth"),
               os.path.join(root, "src") + "\n")
    script = os.path.join(project, "run.py")
    _write(script, MAIN)
    env = dict(os.environ, OTHER_SITE=other_site, EDITABLE_SITE=editable_site,
               PYTHONUSERBASE=userbase)
    # torch itself imported from a directory that is neither a site directory nor holds
    # its metadata (a symlink to the installed package): the CURRENT_DEVICE error
    import torch

    torch_home = os.path.join(tmp, "torchhome")
    os.makedirs(torch_home)
    os.symlink(os.path.dirname(torch.__file__), os.path.join(torch_home, "torch"))
    paths = [torch_home, pp_site, target]
    try:  # transformers imported from a PYTHONPATH site directory (a symlink to it)
        import importlib.util

        spec = importlib.util.find_spec("transformers")
        if spec is not None and spec.submodule_search_locations:
            hf_site = os.path.join(tmp, "hf", "lib", py, "site-packages")
            os.makedirs(hf_site)
            os.symlink(list(spec.submodule_search_locations)[0],
                       os.path.join(hf_site, "transformers"))
            paths.insert(0, hf_site)
            env["HF"] = "1"
    except ImportError:
        pass
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in
                                                 [os.environ.get("PYTHONPATH")] if p])
    return script, env


def test_libraries_wherever_installed_are_not_user_code(tmp_path):
    tmp = os.path.realpath(str(tmp_path))
    script, env = _layouts(tmp)
    r = subprocess.run([sys.executable, script], capture_output=True, text=True, env=env,
                       cwd=os.path.dirname(script), timeout=300)
    out = r.stdout
    assert r.returncode == 0, out + r.stderr[-3000:]
    for name, where in (("lib_pth", "elsewhere"), ("lib_pythonpath", "cluster"),
                        ("lib_target", "target"), ("lib_user", "userbase"),
                        ("lib_editable", "checkout")):
        line = next((ln for ln in out.splitlines() if name in ln), "")
        assert line.startswith("LIBRARY-OK") and os.path.join(tmp, where) in line, out
    # the user's own writes: the script's, and its own editable project's module
    for name, file in (("own", "project/run.py:"), ("own_project", "project/src/own_module.py:")):
        line = next((ln for ln in out.splitlines() if f" {name}" in ln.split(":")[0]), "")
        assert line.startswith("USER-REFUSED") and "assigns global" in line \
            and os.path.join(tmp, file) in line, out
    assert f"TORCH-OK {os.path.join(tmp, 'torchhome', 'torch')}" in out, out
    if env.get("HF"):
        assert f"HF-OK {os.path.join(tmp, 'hf')}" in out, out
    else:
        pytest.skip("transformers is not installed: the Hugging Face layout is not checked")
