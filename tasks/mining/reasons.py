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
    # precondition candidates (call order without data flow, tasks/mining/order.py)
    SELF_ORDER = "self_order"  # both calls resolve to the same function
    TEST_ORDER = "test_order"  # the order is in test code: the steps a test chose (set up, act, read back), no rule of the API
    DATA_FLOW_PAIR = "data_flow_pair"  # the same (consumer, producer) is an accepted data flow: not a bare precondition
    DUPLICATE_ORDER = "duplicate_order"  # merged into the accepted order of the same (consumer, producer): its support
    GENERIC_PRECONDITION = "generic_precondition"  # one side is paired with too many distinct others (log, assertEqual)
    SHARED_STATE = "shared_state"  # state_guard / state_use / keyed_state: the state is set by too many methods to say which one is needed
    CONFLICTING_ORDER = "conflicting_order"  # the reverse order is seen too: comparable support, or more of it
    SPECIAL_METHOD = "special_method"  # Base.__init__(self) before anything: object protocol, not an API order
    REPORTING_CALL = "reporting_call"  # a logging/debug producer, or a test assertion on either side: it changes nothing the other needs
    TEARDOWN_AFTER_ACTION = "teardown_after_action"  # close/quit/join after an action: its prerequisite is the setup (open, start)
    SELF_SEQUENCE = "self_sequence"  # self.a(); self.b() in one method only: an implementation step, not a rule
    INDEPENDENT_SETTERS = "independent_setters"  # set_color(..); set_size(..): setters of different things need no order
    DROPPED_VALUE = "dropped_value"  # validate_first: the producer returns a value that was dropped (called for it, as tests do), not to prepare the operand
