"""The dependency kind of a predicted edge (schemas.toolset.DEPENDENCY_KINDS), decided in one place.

Every edge source asks ``dependency_kind`` what its edge is: an edge found through a parameter (the name
rule's match, the parameter-level scorer's best input) is "data"; a tool-level edge without one is not
known (None). ``precondition`` is the slot for a precondition scorer (a later step): its verdict on the
pair, True making the edge "precondition" where no parameter says data flows.
"""
from __future__ import annotations


def dependency_kind(through_parameter: bool, precondition: bool | None = None) -> str | None:
    """"data" when the edge was found through a parameter (an output of the prerequisite feeds an input of
    the dependent); else "precondition" when a precondition scorer says so; else None (not known).

    A parameter wins over a precondition verdict: a value that is passed is direct evidence of data flow.
    """
    if through_parameter:
        return "data"
    if precondition:
        return "precondition"
    return None
