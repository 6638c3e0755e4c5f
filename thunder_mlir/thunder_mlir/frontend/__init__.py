"""The frontend layer: proxy tracing of torch programs into thunder IR (``tracing``), the
torch-level symbols (``symbols``), guards, sharp edges, autograd and autocast semantics,
and the torch fallback executor the tracer records unsupported ops with."""
