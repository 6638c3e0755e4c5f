"""The transforms layer: passes over thunder IR (``grad``, ``decompose``, ``partition``,
``lower-to-stablehlo``, ...) and their registry (``registry.PASSES``)."""
