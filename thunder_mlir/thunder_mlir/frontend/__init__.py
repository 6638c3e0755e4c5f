"""The frontend layer: proxy tracing of torch programs into thunder IR (``tracing``), the
torch-level symbols (``symbols``), guards, sharp edges, autograd and autocast semantics,
and the torch fallback executor the tracer records unsupported ops with."""

# registers the tracer's dispatch with TensorProxy (ir.proxy.register_dispatch)
from thunder_mlir.frontend import dispatch as _dispatch  # noqa: E402,F401
