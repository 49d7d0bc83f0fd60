"""A verifiers taskset "package" (verifiers' plugin convention: export one Taskset via
`__all__`), so `verifiers:verifiers_add_pkg` resolves through verifiers' own loader."""

from verifiers_add import AddTaskset

__all__ = ["AddTaskset"]
