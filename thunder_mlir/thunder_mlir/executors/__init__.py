"""The executors layer: user executors (``extend``: ``OperatorExecutor``, ``register_executor``)
and the execution transform that lets them claim ops of a traced program."""
