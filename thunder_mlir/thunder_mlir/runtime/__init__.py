"""Runtime: XLA compilation of regions, DLPack transfer, and plan execution."""
