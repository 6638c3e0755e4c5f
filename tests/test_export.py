"""thunder_mlir.export (docs/export.md): artifacts compared with eager PyTorch, run through
thunder_mlir's torch call and, in one child process where ``import torch`` fails, through
``jax.export.deserialize``; dynamic batch and sequence; refusals.

Cost: the models are tiny (GPT-2 2x32, BERT 2x32, a 2-block CNN); all artifacts are built
once (module fixture) and the jax runs share one subprocess."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
import transformers as T
from thunder_mlir.errors import (
    CallArgumentError,
    DataDependentControlFlowError,
    ExportError,
    SharpEdgeError,
)
from torch.export import Dim

import thunder_mlir

VOCAB = 64


def _gpt2():
    torch.manual_seed(0)
    cfg = T.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=VOCAB, bos_token_id=0,
                       eos_token_id=0)
    return T.GPT2LMHeadModel(cfg).eval()


def _bert():
    torch.manual_seed(1)
    cfg = T.BertConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=2,
                       intermediate_size=64, vocab_size=VOCAB)
    return T.BertModel(cfg).eval()


class Block(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(c)
        self.conv2 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(c)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(x + self.bn2(self.conv2(y)))


class ResNetTiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.blocks = torch.nn.Sequential(Block(8), Block(8))
        self.head = torch.nn.Linear(8, 10)

    def forward(self, x):
        y = self.blocks(torch.relu(self.stem(x)))
        return self.head(y.mean(dim=(2, 3)))


def _cnn():
    torch.manual_seed(2)
    m = ResNetTiny()
    for mod in m.modules():  # non-trivial running statistics
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 1.5)
    return m.eval()


def _eager(model, *args, **kwargs):
    with torch.no_grad():
        return model(*args, **kwargs)


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    """name -> (Exported, model, [input tensors for the jax run], eager outputs (numpy))."""
    out = {}
    gpt2, bert, cnn = _gpt2(), _bert(), _cnn()
    torch.manual_seed(3)
    ids = torch.randint(0, VOCAB, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.int64)
    mask[1, 6:] = 0
    img = torch.randn(2, 3, 8, 8)
    batch, seq = Dim("batch", max=8), Dim("seq", max=64)
    out["gpt2_dynamic"] = (thunder_mlir.export(
        gpt2, ids, dynamic_shapes={"input_ids": {0: batch, 1: seq}}, use_cache=False), gpt2)
    out["gpt2_constants"] = (thunder_mlir.export(gpt2, ids, weights="constants",
                                                 use_cache=False), gpt2)
    out["bert_constants"] = (thunder_mlir.export(bert, ids, attention_mask=mask,
                                                 weights="constants"), bert)
    out["cnn_arguments"] = (thunder_mlir.export(cnn, img), cnn)
    out["cnn_constants"] = (thunder_mlir.export(cnn, img, weights="constants"), cnn)
    inputs = {"gpt2_dynamic": [((ids,), {"use_cache": False})]
              + [((torch.randint(0, VOCAB, s),), {"use_cache": False}) for s in [(3, 5), (2, 13)]],
              "gpt2_constants": [((ids,), {"use_cache": False})],
              "bert_constants": [((ids,), {"attention_mask": mask})],
              "cnn_arguments": [((img,), {})],
              "cnn_constants": [((img,), {})]}
    return {k: (exp, model, inputs[k]) for k, (exp, model) in out.items()}


def _gpt2_train():
    """A tiny GPT-2 for a training step: float64 (Adam's normalization amplifies float32
    ulps of the gradients; tests/test_train_step.py's decoders do the same), no dropout
    (eager's dropout draws from torch's generator, an artifact from its seed input)."""
    torch.manual_seed(4)
    cfg = T.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=16,
                       resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
                       eos_token_id=0)
    return T.GPT2LMHeadModel(cfg).double()


def _train_step(model, opt, ids):
    loss = model(ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss


@pytest.fixture(scope="module")
def step_artifact():
    """(Exported of the AdamW step, model, optimizer, ids, the eager twin (model,
    optimizer) at the same initial state, the inputs of the first call by name)."""
    model = _gpt2_train()
    twin = _gpt2_train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    opt_twin = torch.optim.AdamW(twin.parameters(), lr=1e-2, weight_decay=0.1)
    torch.manual_seed(5)
    ids = torch.randint(0, VOCAB, (2, 8))
    exp = thunder_mlir.export(_train_step, model, opt, ids)
    first = {k: v.detach().clone() for k, v in exp.step_inputs(model, opt, ids).items()}
    m1 = _gpt2_train()  # eager's first step, for the jax run
    o1 = torch.optim.AdamW(m1.parameters(), lr=1e-2, weight_decay=0.1)
    loss = _train_step(m1, o1, ids)
    after = {k: v.detach().clone() for k, v in _eager_step_state(m1, o1).items()}
    after["output"] = loss.detach()
    return exp, model, opt, ids, (twin, opt_twin), (first, after)


def _eager_step_state(model, opt) -> dict[str, torch.Tensor]:
    """The values an exported step writes, by output name, from an eager model/optimizer."""
    out = {f"writes.params.{n}": p for n, p in model.named_parameters()}
    for n, p in model.named_parameters():
        for k, v in opt.state[p].items():
            if k != "step":
                out[f"writes.opt.state.{n}.{k}"] = v
    return out


def _logits(out):
    if isinstance(out, torch.Tensor):
        return out
    return out.logits if hasattr(out, "logits") else out.last_hidden_state


@pytest.mark.parametrize("name", ["gpt2_dynamic", "gpt2_constants", "bert_constants",
                                  "cnn_arguments", "cnn_constants"])
def test_torch_call_matches_eager(artifacts, name):
    exp, model, calls = artifacts[name]
    for args, kwargs in calls:  # (gpt2_dynamic: three sizes through one artifact)
        got, ref = exp(*args, **kwargs), _eager(model, *args, **kwargs)
        assert type(got) is type(ref)
        torch.testing.assert_close(_logits(got), _logits(ref), rtol=1e-5, atol=1e-5)
        if hasattr(ref, "pooler_output"):
            torch.testing.assert_close(got.pooler_output, ref.pooler_output)
    # the deserialized artifact means the same
    again = thunder_mlir.deserialize(exp.serialize())
    again.weights = exp.weights
    args, kwargs = calls[-1]
    torch.testing.assert_close(_logits(again(*args, **kwargs)),
                               _logits(_eager(model, *args, **kwargs)), rtol=1e-5, atol=1e-5)


def test_names_and_module(artifacts):
    exp = artifacts["gpt2_dynamic"][0]
    assert "params.transformer.wte.weight" in exp.input_names
    assert exp.input_names[-1] == "args[0]"
    assert exp.output_names == ["output['logits']"]
    assert exp.dims == {"batch": (2, 8), "seq": (2, 64)}
    text = exp.mlir_module()
    assert "func.func public @main(" in text and "tensor<?x?xi64>" in text
    assert "shape_assertion" in text
    assert artifacts["gpt2_constants"][0].input_names == ["args[0]"]
    assert "buffers.blocks.0.bn1.running_mean" in artifacts["cnn_arguments"][0].input_names
    assert artifacts["cnn_constants"][0].input_names == ["args[0]"]  # weights folded in
    bert = artifacts["bert_constants"][0]
    assert bert.input_names == ["args[0]", "kwargs['attention_mask']"]
    assert bert.output_names[-1] == "index_checks"
    assert exp.versions["calling_convention"] == 9


_CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    sys.modules["torch"] = None  # import torch fails in this process
    try:
        import torch  # noqa: F401
        raise SystemExit("torch imported")
    except ImportError:
        pass
    import jax
    jax.config.update("jax_enable_x64", True)  # int64 token ids
    jobs = json.load(open(sys.argv[1]))
    results = {}
    for job in jobs:
        exp = jax.export.deserialize(bytearray(open(job["blob"], "rb").read()))
        args = [np.load(p) for p in job["inputs"]]
        outs = exp.call(*args)
        for k, o in enumerate(outs):
            path = f"{job['out']}_{k}.npy"
            np.save(path, np.asarray(o))
            results.setdefault(job["name"], []).append(path)
    sys.modules.pop("torch", None)
    print(json.dumps(results))
""")


def test_jax_without_torch(artifacts, step_artifact, tmp_path):
    """Every artifact through jax.export.deserialize(...).call in one child process where
    ``import torch`` fails, compared with eager; the training step's first call (inputs
    by name from ``step_inputs``) against eager's first step."""
    jobs, expected = [], {}
    step_exp, _, _, _, _, (first, after) = step_artifact
    blob = tmp_path / "train_step.bin"
    blob.write_bytes(step_exp.serialize())
    paths = []
    for k, name in enumerate(step_exp.input_names):
        p = tmp_path / f"train_step_in{k}.npy"
        np.save(p, first[name].numpy())
        paths.append(str(p))
    jobs.append({"name": "train_step", "blob": str(blob), "inputs": paths,
                 "out": str(tmp_path / "train_step")})
    for name, (exp, model, calls) in artifacts.items():
        blob = tmp_path / f"{name}.bin"
        blob.write_bytes(exp.serialize())
        for c, (args, kwargs) in enumerate(calls[:2]):  # (the torch call runs all sizes)
            paths = []
            for k, t in enumerate(_flat_inputs(exp, args, kwargs)):
                p = tmp_path / f"{name}_{c}_in{k}.npy"
                np.save(p, t.detach().numpy())
                paths.append(str(p))
            job = f"{name}_{c}"
            jobs.append({"name": job, "blob": str(blob), "inputs": paths,
                         "out": str(tmp_path / job)})
            expected[job] = (exp, _eager(model, *args, **kwargs))
    spec = tmp_path / "jobs.json"
    spec.write_text(json.dumps(jobs))
    env = dict(os.environ, PYTHONPATH="")  # (not thunder_mlir's sources either)
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(spec)], capture_output=True,
                          text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(results) == set(expected) | {"train_step"}
    outs = dict(zip(step_exp.output_names, [np.load(p) for p in results.pop("train_step")]))
    assert int(outs.pop("index_checks")) == len(step_exp.checks)
    assert set(outs) == set(after)  # the loss, every parameter and state tensor
    for name, ref in after.items():
        np.testing.assert_allclose(outs[name], ref.numpy(), rtol=1e-5, atol=1e-8,
                                   err_msg=name)
    for job, (exp, ref) in expected.items():
        outs = [np.load(p) for p in results[job]]
        assert len(outs) == len(exp.output_names)
        np.testing.assert_allclose(outs[0], _logits(ref).numpy(), rtol=1e-5, atol=1e-5)
        if exp.output_names[-1] == "index_checks":  # every index in range: the check count
            assert int(outs[-1]) == len(exp.checks)


_TF_CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    sys.modules["torch"] = None  # import torch fails in this process
    import jax
    import tensorflow as tf
    from jax.experimental import jax2tf
    from jax.experimental.jax2tf import jax2tf as jax2tf_impl
    jax.config.update("jax_enable_x64", True)  # int64 token ids
    jobs, saved = json.load(open(sys.argv[1])), sys.argv[2]
    results, fns = {}, {}
    for job in jobs:
        key = (job["blob"], job["how"])
        if key not in fns:
            exp = jax.export.deserialize(bytearray(open(job["blob"], "rb").read()))
            if job["how"] == "convert":  # public: jax exports exp.call again, at its version
                f = jax2tf.convert(exp.call, with_gradient=False, polymorphic_shapes=[
                    str(a.shape) for a in exp.in_avals])
            else:  # jax2tf's own call of an Exported: the artifact's StableHLO as written
                f = (lambda exp: lambda *a: jax2tf_impl._run_exported_as_tf(a, exp))(exp)
            fns[key] = tf.function(f, autograph=False)
        outs = fns[key](*[tf.constant(np.load(p)) for p in job["inputs"]])
        for k, o in enumerate(outs):
            path = f"{job['out']}_{k}.npy"
            np.save(path, o.numpy())
            results.setdefault(job["name"], []).append(path)
        if job.get("saved"):  # a SavedModel of the call, loaded back and run
            m = tf.Module()
            m.f = tf.function(fns[key].python_function, autograph=False, input_signature=[
                tf.TensorSpec(np.load(p).shape, np.load(p).dtype) for p in job["inputs"]])
            tf.saved_model.save(m, saved)
            outs = tf.saved_model.load(saved).f(*[tf.constant(np.load(p))
                                                  for p in job["inputs"]])
            results[job["name"] + "_saved"] = []
            for k, o in enumerate(outs):
                np.save(f"{job['out']}_saved_{k}.npy", o.numpy())
                results[job["name"] + "_saved"].append(f"{job['out']}_saved_{k}.npy")
    print(json.dumps(results))
""")


def test_tensorflow(artifacts, tmp_path):
    """docs/export.md's TensorFlow recipes, in a child process where ``import torch``
    fails, against eager: ``jax2tf.convert(exp.call)`` (public; jax exports the call again
    at its own StableHLO version) for the CNN and GPT-2 with weights as constants and the
    dynamic GPT-2 at 3 sizes; and jax2tf's call of an ``Exported`` as written
    (``_run_exported_as_tf``) on artifacts serialized at TensorFlow's StableHLO version
    (``serialize(stablehlo_version=...)``), BERT included (its erf is a ``chlo``
    composite, which TF 2.21 reads only at its own version), once through a SavedModel.
    Checked with tensorflow-cpu 2.21.0 and jax 0.10.2. Skipped where tensorflow is not
    importable (CI)."""
    if importlib.util.find_spec("tensorflow") is None:
        print("test_tensorflow: tensorflow is not installed (docs/export.md: "
              "tensorflow-cpu 2.21.0 was checked)")
        pytest.skip("tensorflow is not installed")
    env = dict(os.environ, PYTHONPATH="")  # (not thunder_mlir's sources either)
    proc = subprocess.run(
        [sys.executable, "-c", ("from tensorflow.compiler.mlir.stablehlo import stablehlo; "
                                "print(stablehlo.get_current_version())")],
        capture_output=True, text=True, env=env,
        timeout=300, check=True)
    tf_version = proc.stdout.strip().splitlines()[-1]
    jobs, expected = [], {}
    for name, how in [("cnn_constants", "convert"), ("gpt2_constants", "convert"),
                      ("gpt2_dynamic", "convert"), ("cnn_constants", "call"),
                      ("gpt2_dynamic", "call"), ("bert_constants", "call")]:
        exp, model, calls = artifacts[name]
        blob = tmp_path / f"{name}_{how}.bin"
        blob.write_bytes(exp.serialize() if how == "convert" else
                         exp.serialize(stablehlo_version=tf_version))
        for c, (args, kwargs) in enumerate(calls):
            paths = []
            for k, t in enumerate(_flat_inputs(exp, args, kwargs)):
                paths.append(str(tmp_path / f"{name}_{how}_{c}_in{k}.npy"))
                np.save(paths[-1], t.detach().numpy())
            job = f"{name}_{how}_{c}"
            jobs.append({"name": job, "blob": str(blob), "inputs": paths, "how": how,
                         "out": str(tmp_path / job), "saved": name == "bert_constants"})
            expected[job] = (exp, _eager(model, *args, **kwargs))
            if name == "bert_constants":
                expected[job + "_saved"] = expected[job]
    spec = tmp_path / "jobs.json"
    spec.write_text(json.dumps(jobs))
    proc = subprocess.run([sys.executable, "-c", _TF_CHILD, str(spec), str(tmp_path / "saved")],
                          capture_output=True, text=True, env=env, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(results) == set(expected)
    for job, (exp, ref) in expected.items():
        outs = [np.load(p) for p in results[job]]
        assert len(outs) == len(exp.output_names), job
        np.testing.assert_allclose(outs[0], _logits(ref).numpy(), rtol=1e-5, atol=1e-5,
                                   err_msg=job)
        if exp.output_names[-1] == "index_checks":  # every index in range: the check count
            assert int(outs[-1]) == len(exp.checks), job


def test_stablehlo_version(artifacts):
    """``serialize(stablehlo_version=...)`` writes the module for an older StableHLO (the
    portable artifact's producer version, ``versions["stablehlo"]``) and means the same;
    a version outside the installed StableHLO's range is refused."""
    exp, model, calls = artifacts["cnn_constants"]
    assert exp.versions["stablehlo"] in exp.jax_exported.mlir_module_serialized.decode(
        "latin-1")  # (the bytecode's producer string: "StableHLO_v1.15.0")
    again = thunder_mlir.deserialize(exp.serialize(stablehlo_version="1.13.7"))
    assert again.versions["stablehlo"] == "1.13.7"
    assert b"StableHLO_v1.13.7" in again.jax_exported.mlir_module_serialized
    (args, kwargs), = calls
    torch.testing.assert_close(again(*args, **kwargs), _eager(model, *args, **kwargs))
    bert = thunder_mlir.deserialize(artifacts["bert_constants"][0].serialize(
        stablehlo_version="1.13.7"))  # (its chlo.erf: a composite of the older form)
    assert bert.versions["stablehlo"] == "1.13.7"
    for bad in ["0.1.0", "99.0.0", "latest"]:
        with pytest.raises(ExportError, match="StableHLO versions"):
            exp.serialize(stablehlo_version=bad)


def _flat_inputs(exp, args, kwargs) -> list[torch.Tensor]:
    """``@main``'s flat inputs of a call, in ``input_names`` order (jax's ``.call``)."""
    flat = [exp.weights[n] for n in exp.input_names if n in exp.weights]
    return flat + list(args) + [v for v in kwargs.values() if isinstance(v, torch.Tensor)]


def test_dynamic_refuses_outside_range(artifacts):
    exp = artifacts["gpt2_dynamic"][0]
    with pytest.raises(CallArgumentError, match="batch = 9 is outside"):
        exp(torch.zeros(9, 4, dtype=torch.int64), use_cache=False)
    with pytest.raises(CallArgumentError, match="baked into"):
        exp(torch.zeros(2, 4, dtype=torch.int64), use_cache=True)
    with pytest.raises(CallArgumentError, match="must be tensor"):
        exp(torch.zeros(2, 4, dtype=torch.int32), use_cache=False)


def test_index_check_and_inplace_write():
    def f(table, idx, counter):
        counter.add_(1)  # an in-place side effect on an input
        return torch.nn.functional.embedding(idx, table).sum(0)
    table, idx, counter = torch.randn(5, 3), torch.tensor([0, 4]), torch.zeros(2)
    exp = thunder_mlir.export(f, table, idx, counter)
    assert exp.output_names == ["output", "writes.args[2]", "index_checks"]
    ref_counter = counter.clone()
    ref = f(table, idx, ref_counter)
    torch.testing.assert_close(exp(table, idx, counter), ref)
    torch.testing.assert_close(counter, ref_counter)
    with pytest.raises(IndexError, match="test_export.py"):  # eager's error, the user's line
        exp(table, torch.tensor([0, 7]), counter)
    torch.testing.assert_close(counter, ref_counter)  # nothing written by a failed call


def test_shape_guard_and_shared_dim():
    n = Dim("n", max=100)

    def f(x, y):
        if x.shape[0] > 4:  # a shape guard: the artifact holds for n > 4 only
            return x * 2 + y
        return x - y
    x, y = torch.randn(6, 3), torch.randn(6, 3)
    exp = thunder_mlir.export(f, x, y, dynamic_shapes=({0: n}, {0: n}))
    torch.testing.assert_close(exp(torch.ones(9, 3), torch.ones(9, 3)), f(torch.ones(9, 3),
                                                                          torch.ones(9, 3)))
    with pytest.raises(CallArgumentError, match="shape guard"):
        exp(torch.ones(3, 3), torch.ones(3, 3))
    with pytest.raises(CallArgumentError, match="n = 9"):
        exp(torch.ones(9, 3), torch.ones(8, 3))


_SIDE = [0]


def test_refusals():
    x = torch.randn(4, 4)
    with pytest.raises(ExportError, match=r"bessel_j0.*test_export.py:\d+"):
        thunder_mlir.export(lambda t: torch.special.bessel_j0(t) + 1, x)

    def branch(t):
        if t.sum() > 0:  # data-dependent control flow: a value guard
            return t * 2
        return t
    with pytest.raises(DataDependentControlFlowError, match="test_export.py"):
        thunder_mlir.export(branch, x)
    with pytest.raises(SharpEdgeError):
        thunder_mlir.export(lambda t: t * random.random(), x)

    class Counting(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.calls = 0

        def forward(self, t):
            self.calls += 1  # a Python side effect
            return t + 1
    with pytest.raises(ExportError, match="Counting.calls"):
        thunder_mlir.export(Counting(), x)
    with pytest.raises(ExportError, match="view of an input"):
        thunder_mlir.export(lambda t: t.view(-1), x)

    def sized(t):
        return t.new_zeros(int(t.shape[0])) + t.sum()  # the size needed as a Python int
    with pytest.raises(ExportError, match="cannot keep"):
        thunder_mlir.export(sized, x, dynamic_shapes={"t": {0: Dim("n")}})
    with pytest.raises(ExportError, match="at least 2"):
        thunder_mlir.export(lambda t: t + 1, torch.randn(1, 3),
                            dynamic_shapes={"t": {0: Dim("n")}})


@pytest.mark.parametrize("name", ["cnn_arguments", "cnn_constants", "gpt2_constants",
                                  "bert_constants"])
def test_iree(artifacts, name):
    """The exported module compiled by IREE (``llvm-cpu``) and run by its runtime,
    compared with eager (every output of the tree; ``index_checks``: every index in range).
    The CNN with weights as constants runs in CI (~2 s of iree-compile's CPU); the CNN with
    weights as arguments (as long again) and GPT-2 and BERT tiny (weights as constants, ~7 s
    each on 2 cores) run with THUNDER_MLIR_SLOW_TESTS=1. Skipped where iree is not
    installed."""
    try:
        import iree.compiler as ic
        import iree.runtime as ir
    except ImportError:
        print("test_iree: iree-base-compiler/iree-base-runtime are not installed")
        pytest.skip("iree is not installed")
    if name != "cnn_constants" and not os.environ.get("THUNDER_MLIR_SLOW_TESTS"):
        cost = "~2 s" if name == "cnn_arguments" else "~7 s"
        print(f"test_iree[{name}]: skipped ({cost} of iree-compile on 2 cores)")
        pytest.skip(f"{cost} of iree-compile on 2 cores (CI runs cnn_constants); "
                    "set THUNDER_MLIR_SLOW_TESTS=1 to run it")
    exp, model, calls = artifacts[name]
    args, kwargs = calls[0]
    n_w = exp._meta["n_weights"] if exp._meta["weights"] == "arguments" else 0
    weights = [exp.weights[n].detach().numpy() for n in exp.input_names[:n_w]]
    inputs = [x.numpy() for x in (*args, *kwargs.values()) if isinstance(x, torch.Tensor)]
    # (--iree-opt-const-eval=false: the constants' transposes are folded at run time,
    # not by a JIT during the compile: ~20% of GPT-2's compile)
    vmfb = ic.compile_str(exp.mlir_module(), input_type="stablehlo",
                          target_backends=["llvm-cpu"],
                          extra_args=["--iree-llvmcpu-target-cpu=host",
                                      "--iree-opt-const-eval=false"])
    ctx = ir.SystemContext(config=ir.Config("local-task"))
    ctx.add_vm_module(ir.VmModule.copy_buffer(ctx.instance, vmfb))
    out = ctx.modules.module["main"](*weights, *inputs)
    outs = [np.asarray(o) for o in (out if isinstance(out, (list, tuple)) else [out])]
    assert len(outs) == len(exp.output_names)
    if exp.output_names[-1] == "index_checks":
        assert int(outs.pop()) == len(exp.checks)
    ref = _eager(model, *args, **kwargs)
    refs = [ref] if isinstance(ref, torch.Tensor) else [v for v in ref.values()]
    assert len(outs) == len(refs)
    for o, r in zip(outs, refs):
        np.testing.assert_allclose(o, r.numpy(), rtol=1e-4, atol=1e-5)


def test_train_step_matches_eager(step_artifact):
    """The exported AdamW step of a GPT-2 tiny: 3 torch calls of the artifact against 3
    eager steps (loss, parameters, optimizer state incl. step counters), with
    ``(model, opt, *batch)`` updated in place as eager's step does."""
    exp, model, opt, ids, (twin, opt_twin), _ = step_artifact  # (mutated here)
    assert exp.input_names[0] == "params.transformer.wte.weight"
    assert "opt.state.transformer.wte.weight.exp_avg" in exp.input_names
    assert "opt.param_groups[0].scalars" in exp.input_names
    assert exp.input_names[-1] == "args[2]"
    assert exp.output_names[0] == "output"
    assert "writes.opt.state.lm_head.weight.exp_avg_sq" in exp.output_names \
        or "writes.opt.state.transformer.wte.weight.exp_avg_sq" in exp.output_names
    for _ in range(3):
        loss = exp(model, opt, ids)
        ref = _train_step(twin, opt_twin, ids)
        torch.testing.assert_close(loss, ref.detach(), rtol=1e-6, atol=1e-6)
        for (n, p), p2 in zip(model.named_parameters(), twin.parameters()):
            torch.testing.assert_close(p, p2, rtol=1e-5, atol=1e-6, msg=n)
            assert p.grad is None and p2.grad is None
            for k, v in opt_twin.state[p2].items():
                torch.testing.assert_close(opt.state[p][k], v, rtol=1e-5, atol=1e-8)
    assert float(opt.state[next(model.parameters())]["step"]) == 3.0
    # a call that differs from the export in what the program was traced for is refused,
    # before anything is written: which .grad exist, training flags, frozen parameters
    p0 = next(model.parameters())
    before = p0.detach().clone()
    p0.grad = torch.zeros_like(p0)
    with pytest.raises(CallArgumentError, match="zero_grad"):
        exp(model, opt, ids)
    p0.grad = None
    model.eval()
    with pytest.raises(CallArgumentError, match="training flags"):
        exp(model, opt, ids)
    model.train()
    p0.requires_grad_(False)
    with pytest.raises(CallArgumentError, match="requires_grad"):
        exp(model, opt, ids)
    p0.requires_grad_(True)
    assert torch.equal(p0, before) and float(opt.state[p0]["step"]) == 3.0


class _TwoHeads(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.ln, self.b = torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), \
            torch.nn.Linear(16, 4)

    def forward(self, x, scale: float = 2.0):
        h = torch.tanh(self.ln(self.a(x)))
        return self.b(h) * scale, h.sum(-1)


def test_vjp_matches_autograd():
    """``Exported.vjp()``: the backward as a second artifact, (primal inputs, output
    cotangents) -> input cotangents, against torch.autograd.grad."""
    torch.manual_seed(6)
    model, x = _TwoHeads(), torch.randn(3, 8)
    exp = thunder_mlir.export(model, x, scale=3.0)
    vjp = exp.vjp()
    assert vjp.input_names == exp.input_names + ["cotangents.output[0]",
                                                 "cotangents.output[1]"]
    assert vjp.output_names == [f"grads.{n}" for n in exp.input_names]
    cts = [torch.randn(3, 4), torch.randn(3)]
    params = dict(model.named_parameters())
    wrt = [params[n[len("params."):]] for n in exp.input_names[:-1]]
    xr = x.clone().requires_grad_()
    ref = torch.autograd.grad(model(xr, scale=3.0), wrt + [xr], cts)
    got = vjp.call_flat(*[exp.weights[n] for n in exp.input_names[:-1]], x, *cts)
    for g, r, name in zip(got, ref, vjp.output_names):
        torch.testing.assert_close(g, r, msg=name)
    again = thunder_mlir.deserialize(vjp.serialize())  # a portable artifact as any other
    torch.testing.assert_close(again.call_flat(*[exp.weights[n] for n in
                                                 exp.input_names[:-1]], x, *cts)[-1], ref[-1])
    with pytest.raises(ExportError, match="deserialized"):
        thunder_mlir.deserialize(exp.serialize()).vjp()


def test_a_step_reading_a_plain_tensor_attribute_is_refused_by_name():
    # jit(step) makes the tensor an input (train_step.py ``TrainStep.lifted``); an exported
    # step names its inputs and has no name for it: ExportError, not a trace error
    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(3))
            self.scale = torch.randn(3)  # neither a parameter nor a buffer

        def forward(self, x):
            return (x * self.w * self.scale).sum()

    def step(model, opt, x):
        loss = model(x)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss
    model = Scaled()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ExportError, match=r"plain attributes \(0\.scale\).*register_buffer"):
        thunder_mlir.export(step, model, opt, torch.randn(3))
    twin = copy.deepcopy(model)
    twin_opt = torch.optim.SGD(twin.parameters(), lr=0.1)
    x = torch.randn(3)
    torch.testing.assert_close(thunder_mlir.jit(step)(twin, twin_opt, x),
                               step(model, opt, x).detach())
    torch.testing.assert_close(twin.w, model.w)
