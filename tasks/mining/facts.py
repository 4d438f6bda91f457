"""What parsing records per source file: a module's facts (:class:`ModuleFacts`) with its candidate flows
(:class:`RawFlow`) and precondition pairs (:class:`RawOrder`), or why the file could not be read (:class:`FileRejection`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from tasks.mining.docs import FunctionFacts


MODULE_BODY = "<module>"  # the qualname of a module's top-level statements in record ids


class RawFlow(NamedTuple):
    """A candidate flow as the parser sees it; targets are qualified names or None."""

    record_id: str  # module:function:line:col:slot
    consumer: str | None
    producer: str | None
    slot: str  # the argument: "0", "1", ... (positional) or a keyword name
    via: str  # direct | variable
    bound: bool  # the consumer was called through self./cls. (first parameter already bound)
    reason: str | None  # a rejection known at parse time
    detail: str
    unpack: int = 0  # ``a, b = f(x); g(a)``: the number of names unpacked; -1: ``for a in f(x)``; 0: the whole value flows


class RawOrder(NamedTuple):
    """A candidate precondition pair (tasks/mining/order.py): ``consumer`` was called after ``producer``,
    sharing an operand, with no value of the producer reaching it; targets are qualified names or None."""

    record_id: str  # module:function:line:col:after:line:col (the consumer's call, then the producer's)
    consumer: str | None
    producer: str | None
    pattern: str  # guard | same_receiver | validate_first (``doctest:`` / ``doctest_usage:`` before them in examples) | a stated one
    consumer_bound: bool  # called through self./cls. or a typed receiver (as RawFlow.bound)
    producer_bound: bool
    reason: str | None  # a rejection known at parse time
    detail: str
    on_self: bool = False  # same_receiver on the method's own ``self``: a step of the class's own implementation


@dataclass
class ModuleFacts:
    module: str
    origin: str  # stdlib | site-packages | tree | codesearchnet
    path: str
    is_package: bool
    source_id: str = ""  # the file (or function record) read: its id in the books
    functions: dict[str, FunctionFacts] = field(default_factory=dict)  # by qualname in the module
    duplicated: set[str] = field(default_factory=set)  # qualnames defined more than once
    classes: set[str] = field(default_factory=set)
    bases: dict[str, list[str]] = field(default_factory=dict)  # class -> qualified base names (for inherited methods)
    imports: dict[str, str] = field(default_factory=dict)  # local name -> qualified target
    star_imports: list[str] = field(default_factory=list)  # modules of ``from m import *``, in order
    # names bound at module level, kept only in a module with star imports: any other name it uses comes from one
    module_names: frozenset[str] = frozenset()
    flows: list[RawFlow] = field(default_factory=list)
    orders: list[RawOrder] = field(default_factory=list)  # candidate precondition pairs (call order, no data)
    flows_only: bool = False  # test code (FileItem.flows_only): not a module that names resolve to
    orders_read: bool = True  # its call orders were scanned (parse skips test code's unless asked: ``test_orders``)
    assigned: list[tuple[str, str]] = field(default_factory=list)  # (callee, variable) of ``variable = callee(...)``
    # names bound once at module level: ``log = Logger(...)`` / ``log: Logger`` (type string) and
    # ``CONFIG = load_config(...)`` (the qualified callee whose value the name holds)
    global_types: dict[str, str] = field(default_factory=dict)
    global_values: dict[str, str] = field(default_factory=dict)
    # class -> self.<attr> -> type string, where every binding in the class agrees (``parse._class_attr_types``);
    # class -> every attribute the class binds (typed or not): a subclass's binding hides the base's type
    attr_types: dict[str, dict[str, str]] = field(default_factory=dict)
    attr_bound: dict[str, frozenset[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class FileRejection:
    record_id: str  # file:<origin>:<path>
    reason: str
    detail: str
