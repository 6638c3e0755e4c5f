"""Compile GPU programs with XLA's GPU compiler and no GPU, and count their kernels, bytes,
FLOPs, roofline time and memory (the deviceless half of benchmarks/gpu_programs.py).

Runs in the venv ``make gpu-aot`` builds (Python 3.12, jax/jaxlib 0.12.0.1 with the CUDA
12 plugin and ptxas from ``nvidia-cuda-nvcc-cu12``): ``get_topology_desc(platform="cuda",
target_config=...)`` gives a compile-only device of an H100 or H200 (toolchain.md section
11), whose client compiles StableHLO through XLA's whole GPU pipeline (fusion, gemm
rewriting, scheduling, buffer assignment), without autotuning.

    gpu_compile.py --target h100 --programs DIR --out RESULTS.json

``DIR/manifest.json`` lists the workloads (benchmarks/gpu_programs.py writes it with
thunder_mlir's captured programs, one StableHLO file per region); for each, this script
compiles thunder_mlir's regions and the same model written in plain jax
(benchmarks/jax_models.py) with plain attention and with cuDNN attention, and writes one
JSON object per workload.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import jax

jax.config.update("jax_platforms", "cpu")  # (no device probe: the target is compile-only)

from jax.experimental import topologies  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hlo_stats  # noqa: E402
import jax_models  # noqa: E402

# GpuTargetConfigProto texts (XLA's xla/backends/gpu/target_config/specs/h100_sxm.txtpb,
# reduced to the fields the plugin parses; toolchain.md section 11), and the datasheet
# peaks the roofline uses: dense bf16 tensor-core FLOP/s and HBM bandwidth.
_H100 = """
gpu_device_info { threads_per_block_limit: 1024 threads_per_warp: 32 shared_memory_per_block: 49152
  shared_memory_per_core: 233472 threads_per_core_limit: 2048 core_count: 132 fpus_per_core: 128
  block_dim_limit_x: 2147483647 block_dim_limit_y: 65535 block_dim_limit_z: 65535
  l2_cache_size: 52428800 clock_rate_ghz: 1.98 shared_memory_per_block_optin: 232448
  cuda_compute_capability { major: 9 } registers_per_core_limit: 65536 registers_per_block_limit: 65536
  memory_bandwidth: %(bw)d device_memory_size: %(mem)d }
platform_name: "CUDA"
dnn_version_info { major: 9 minor: 10 }
runtime_version { major: 12 minor: 8 }
device_description_str: "%(name)s"
"""
# Dense matmul peaks of the H100/H200 SXM datasheet: bf16/fp16 tensor cores 989 TFLOP/s,
# fp32 67 (no TF32: precision HIGHEST), fp64 67 (tensor cores), fp8 1979.
_PEAKS = {"default": 989e12, "bf16": 989e12, "f16": 989e12, "f32": 67e12, "f64": 67e12,
          "f8e4m3fn": 1979e12, "f8e5m2": 1979e12}
TARGETS = {
    "h100": {"name": "NVIDIA H100 80GB HBM3", "bw": 3352320000000, "mem": 84942979072,
             "peak_flops": _PEAKS, "bandwidth": 3.35e12},
    "h200": {"name": "NVIDIA H200 141GB HBM3e", "bw": 4800000000000, "mem": 151397597184,
             "peak_flops": _PEAKS, "bandwidth": 4.8e12},
}


class Device:
    """The compile-only device of a target, and how to compile for it."""

    def __init__(self, target: str):
        import jax._src.cudnn.fused_attention_stablehlo as fused

        # jax asks the cuDNN library for its version before emitting the fused attention
        # call; there is none without a GPU: the target's (9.10) is what XLA compiles for
        fused.check_cudnn_version = lambda: 91000
        spec = TARGETS[target]
        self.spec = spec
        self.topology = topologies.get_topology_desc(
            platform="cuda", target_config=_H100 % spec, topology="1x1x1")
        self.device = self.topology.devices[0]
        self.mesh = topologies.make_mesh(topo=self.topology, mesh_shape=(1,),
                                         axis_names=("x",))

    def compile_stablehlo(self, text: str, options=()):
        """Compile a StableHLO module (entry ``@main``) for the device, with XLA debug
        ``options`` ((name, value) pairs: those thunder_mlir's runtime sets)."""
        from jax._src import compiler
        from jax._src.lib import xla_client

        opts = compiler.get_compile_options(num_replicas=1, num_partitions=1,
                                            device_assignment=[self.device],
                                            backend=self.device.client)
        if options:
            opts.env_option_overrides = [tuple(o) for o in options]
        from jax._src.interpreters import mlir
        from jax._src.lib.mlir import ir

        # (the compile-only client takes a parsed module, not text)
        with mlir.make_ir_context():
            module = ir.Module.parse(text)
            return self.device.client.compile(
                module, executable_devices=xla_client.DeviceList((self.device,)),
                compile_options=opts)

    def compile_jax(self, fn, args, donate=()):
        """Compile ``jax.jit(fn)`` for argument shapes ``args`` (ShapeDtypeStruct pytrees)."""
        sharding = NamedSharding(self.mesh, PartitionSpec())
        args = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding),
                            args)
        return jax.jit(fn, donate_argnums=donate).lower(*args).compile()

    def stats(self, compiled, text: str | None = None) -> hlo_stats.ProgramStats:
        text = text if text is not None else _optimized_text(compiled)
        mem = {}
        try:
            m = compiled.memory_analysis() if hasattr(compiled, "memory_analysis") else \
                compiled.get_compiled_memory_stats()
            mem = {"temp": m.temp_size_in_bytes, "argument": m.argument_size_in_bytes,
                   "output": m.output_size_in_bytes, "alias": m.alias_size_in_bytes}
        except Exception as e:  # noqa: BLE001 - reported, not fatal
            mem = {"error": str(e)[:200]}
        return hlo_stats.analyze(text, self.spec["peak_flops"], self.spec["bandwidth"], mem)


def _optimized_text(compiled) -> str:
    if hasattr(compiled, "as_text"):
        return compiled.as_text()
    return compiled.hlo_modules()[0].to_string()


def summary(stats: hlo_stats.ProgramStats, top: int = 10) -> dict:
    """A program's figures as JSON: kernels by kind, bytes, FLOPs, roofline seconds, XLA's
    memory, and the ``top`` kernels by roofline time."""
    biggest = sorted(stats.kernels, key=lambda k: -k.seconds)[:top]
    return {"kernels": len(stats.kernels), "kinds": dict(stats.kinds().most_common()),
            "bytes": stats.bytes, "flops": stats.flops, "seconds": stats.seconds,
            "memory": stats.memory, "loops": stats.loops,
            "top": [_kernel(k) for k in biggest],
            "all": [_kernel(k) for k in stats.kernels]}


def _kernel(k: hlo_stats.Kernel) -> dict:
    return {"name": k.name, "kind": k.kind, "bytes": k.bytes, "flops": k.flops,
            "seconds": k.seconds, "source": k.source, "op": k.op_name}


def beyond_parameters(programs: list[dict]) -> float:
    """The memory a step needs beyond its arguments (parameters, optimizer state, the
    batch): one program's temporaries and the outputs not aliased with an argument; for a
    forward and its backward, the larger of the forward's (temporaries and outputs) and
    the backward's (the forward's outputs, its arguments then, plus its own temporaries
    and unaliased outputs)."""
    def own(m):
        return m.get("temp", 0) + m.get("output", 0) - m.get("alias", 0)
    mems = [p["memory"] for p in programs]
    if len(mems) == 1:
        return own(mems[0])
    fwd, bwd = mems[0], mems[-1]
    return max(own(fwd), fwd.get("output", 0) + own(bwd))


def thunder_programs(device: Device, workload: dict, root: str) -> list[dict]:
    out = []
    for prog in workload["programs"]:
        kernels = []
        texts = []
        per_region = []
        for region in prog["regions"]:
            with open(os.path.join(root, region["file"])) as f:
                text = f.read()
            t0 = time.perf_counter()
            compiled = device.compile_stablehlo(text, region.get("options", ()))
            s = device.stats(compiled)
            per_region.append((s, time.perf_counter() - t0))
            kernels += s.kernels
            texts.append(region["file"])
        merged = hlo_stats.ProgramStats(kernels)
        mem = {}
        for s, _ in per_region:
            for k, v in s.memory.items():
                if isinstance(v, (int, float)):
                    mem[k] = mem.get(k, 0) + v  # (regions run one after another)
        merged.memory = mem
        d = summary(merged)
        d.update(name=prog["name"], regions=len(prog["regions"]),
                 torch_steps=prog["torch_steps"],
                 compile_s=sum(t for _, t in per_region))
        out.append(d)
    return out


def reference_programs(device: Device, workload: dict, impl: str) -> list[dict]:
    ref = workload["reference"]
    model = ref["model"]
    config = jax_models.MODELS[model][0](**ref.get("config", {}))
    progs = jax_models.programs(model, config, impl, ref["batch"], ref["seq"])
    fn, args, donate = progs[ref["program"]]
    t0 = time.perf_counter()
    compiled = device.compile_jax(fn, args, donate)
    d = summary(device.stats(compiled))
    d.update(name=ref["program"], compile_s=time.perf_counter() - t0)
    return [d]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="h100", choices=sorted(TARGETS))
    p.add_argument("--programs", required=True, help="the folder gpu_programs.py wrote")
    p.add_argument("--out", required=True)
    p.add_argument("--references", default="xla,cudnn,cudnn-opmath",
                   help="attention implementations of the plain-jax references")
    p.add_argument("--workloads", default=None, help="only these (default: the manifest's)")
    args = p.parse_args(argv)
    with open(os.path.join(args.programs, "manifest.json")) as f:
        manifest = json.load(f)
    device = Device(args.target)
    results = {"target": args.target, "device": device.spec["name"], "jax": jax.__version__,
               "workloads": []}
    wanted = args.workloads.split(",") if args.workloads else None
    for w in manifest["workloads"]:
        if wanted is not None and w["name"] not in wanted:
            continue
        row = {"name": w["name"], "reference": w["reference"]}
        try:
            row["thunder"] = thunder_programs(device, w, args.programs)
            copied = w["reference"].get("write_back_bytes", 0)
            if copied:  # torch's copies of the written inputs after the run: a kernel more
                k = hlo_stats.Kernel("write-back", "copy (torch write-back)", 2.0 * copied,
                                     0.0, "runtime/write_back.py", "copy_")
                k.seconds = k.bytes / device.spec["bandwidth"]
                last = row["thunder"][-1]
                last["kernels"] += 1
                last["bytes"] += k.bytes
                last["seconds"] += k.seconds
                last["kinds"][k.kind] = 1
                last["all"].append(_kernel(k))
            row["thunder_beyond_parameters"] = beyond_parameters(row["thunder"])
        except Exception as e:  # noqa: BLE001 - one failing workload must not end the run
            row["thunder_error"] = f"{type(e).__name__}: {e}"[:2000]
        for impl in [r for r in args.references.split(",") if r]:
            if w["reference"]["model"] not in jax_models.MODELS:
                continue  # (a timm model: no plain-jax twin)
            if impl.endswith("-opmath") and (w["reference"]["model"] != "gpt2" or
                                             w["reference"]["program"] != "prefill"):
                # (Llama has no biased linear layers; in a training step jax differentiates
                # the float32 products into float32 gemms, and a decode step's gemms are
                # matrix-vector products: the arithmetic compared only in the prefill)
                continue
            try:
                progs = reference_programs(device, w, impl)
                row[f"jax_{impl}"] = progs
                row[f"jax_{impl}_beyond_parameters"] = beyond_parameters(progs)
            except Exception as e:  # noqa: BLE001
                row[f"jax_{impl}_error"] = f"{type(e).__name__}: {e}"[:2000]
        results["workloads"].append(row)
        print(json.dumps({"workload": w["name"], "done": True}), flush=True)
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
