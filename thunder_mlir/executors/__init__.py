"""Built-in executors: ``xla`` (everything that lowers to StableHLO) and ``torch`` (fallback)."""
