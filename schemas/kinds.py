"""The kinds of a dependency, shared by TDI pairs (schemas/tdi.py ``kind``) and tool-set edges
(schemas/toolset.py ``DependencyEdge.kind``): "data", an output of the prerequisite feeds an input of the
dependent; "precondition", the prerequisite must be called first (a check, a lookup of state, an
authentication, a confirmation) and no value is passed."""
from __future__ import annotations

KIND_DATA = "data"
KIND_PRECONDITION = "precondition"
DEPENDENCY_KINDS = (KIND_DATA, KIND_PRECONDITION)
