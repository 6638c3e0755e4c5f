"""The tools layer: command-line tools over thunder IR (``thunder-opt``)."""
