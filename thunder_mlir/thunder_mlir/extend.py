"""``thunder_mlir.extend``: user executors (Lightning Thunder's ``thunder.extend``). The
implementation is ``thunder_mlir.executors.extend``; this module is its public surface.

    from thunder_mlir.extend import OperatorExecutor, register_executor, get_grad, put_grads
"""

from thunder_mlir.errors import ExecutorError  # noqa: F401
from thunder_mlir.executors.extend import (  # noqa: F401
    OperatorExecutor, get_all_executors, get_executor, get_grad, put_grad, put_grads,
    register_executor)
from thunder_mlir.executors import execution_transform  # noqa: F401 (registers the pass)

__all__ = ["OperatorExecutor", "ExecutorError", "register_executor", "get_executor",
           "get_all_executors", "get_grad", "put_grad", "put_grads"]
