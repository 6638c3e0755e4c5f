"""Facts about the machine a benchmark runs on, printed beside its figures (the CPU decides
verdicts: an Intel Xeon and an AMD EPYC gave opposite ones on the same rows)."""

from __future__ import annotations

import subprocess


def cpu_name() -> str:
    """lscpu's model name, family and model, and the CPU count; "unknown CPU" without lscpu."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        info = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
        return (f"{info['Model name'].strip()} (family {info['CPU family'].strip()}, model "
                f"{info['Model'].strip()}), {info['CPU(s)'].strip()} CPUs")
    except (OSError, subprocess.CalledProcessError, KeyError):
        return "unknown CPU"
