"""The dependency kind of a predicted edge (schemas.toolset.DEPENDENCY_KINDS), decided in one place.

Every edge source asks ``dependency_kind`` what its edge is: an edge found through a parameter (the name
rule's match, the parameter-level scorer's best input) is "data"; a tool-level edge without one takes the
discriminator's kind head's verdict (``precondition``: True "precondition", False "data"), and is not known
(None) where there is no verdict (a checkpoint without the head).
"""
from __future__ import annotations


def dependency_kind(through_parameter: bool, precondition: bool | None = None) -> str | None:
    """"data" when the edge was found through a parameter (an output of the prerequisite feeds an input of
    the dependent); else the kind head's verdict: "precondition" when True, "data" when False; else None
    (no verdict: not known).

    A parameter wins over a precondition verdict: a value that is passed is direct evidence of data flow.
    """
    if through_parameter:
        return "data"
    if precondition is None:
        return None
    return "precondition" if precondition else "data"
