"""Rejection reason codes of mined candidates and source files (:class:`MineReason`): the stable strings
stored in records.duckdb."""
from __future__ import annotations


class MineReason:
    """Rejection reason codes of candidates and source files (stable strings, stored in records.duckdb)."""

    # source files
    UNREADABLE_FILE = "unreadable_file"
    BAD_ENCODING = "bad_encoding"
    SYNTAX_ERROR = "syntax_error"
    FILE_TOO_LARGE = "file_too_large"
    DUPLICATE_MODULE = "duplicate_module"  # a second file with a module name already read
    # candidates
    TUPLE_UNPACK = "tuple_unpack"  # ``a, b = f(x); g(a)``: which element flows is unknown
    LOOP_ITEM = "loop_item"  # ``for a in f(x): g(a)``: f is not known to give a collection of like items
    UNRESOLVED_TARGET = "unresolved_target"  # a local, builtin, attribute of an object, missing module...
    AMBIGUOUS_TARGET = "ambiguous_target"  # defined twice (conditional defs) or module read twice
    UNDOCUMENTED_PRODUCER = "undocumented_producer"
    UNDOCUMENTED_CONSUMER = "undocumented_consumer"
    PRODUCER_RETURNS_NOTHING = "producer_returns_nothing"  # no ``return <value>``: nothing flows
    SELF_FLOW = "self_flow"  # g(g(x)): a function does not depend on itself
    BAD_ARGUMENT_POSITION = "bad_argument_position"  # positional index beyond the signature, unknown keyword
    UNDOCUMENTED_PARAMETER = "undocumented_parameter"  # reaches *args/**kwargs the doc does not list
    DUPLICATE_FLOW = "duplicate_flow"  # same (consumer, producer) as an accepted candidate
    GENERIC_SINK = "generic_sink"  # the parameter takes values from too many producers (assert_equal, dumps, latex)
