"""Transform passes over thunder IR (installed as ``thunder_mlir.passes``)."""

from .registry import PASSES, Pass, get_pass  # noqa: F401
