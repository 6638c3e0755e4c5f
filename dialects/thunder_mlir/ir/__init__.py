"""The IR layer: the ``thunder`` dialect (``dialect``), dtype mapping (``dtypes``), the
shared MLIR context (``context``), region utilities (``regions``), and the prims with the
builder the tracer and the passes emit them through (``proxy``, ``prims``)."""
