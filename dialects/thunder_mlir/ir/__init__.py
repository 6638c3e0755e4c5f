"""The IR layer: the ``thunder`` dialect (``dialect``), the prims defined once each
(``primdef``: the ``PrimDef`` class; ``prim_defs``: every prim's definition, with its
StableHLO lowering patterns in ``hlo`` and its VJP rules in ``vjp_rules``), dtype mapping
(``dtypes``), the shared MLIR context (``context``), region utilities (``regions``), and the
builder the tracer and the passes emit prims through (``proxy``, ``prims``)."""
