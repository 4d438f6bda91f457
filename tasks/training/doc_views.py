"""How a TDI doc is shown to the discriminator in training: views of the mined docs that make them look more like
the tool catalogs it will score. The TDI rows keep the code's docs; only what the model reads changes.

**Methods as tools** (``--method-docs``): as mined (``Queue.get``, the receiver implied by the class in its name)
or as a tool (``get(queue: Queue)``, the receiver an input like any other). Tool catalogs have no classes: the
object a tool acts on is an input (``account_id``, ``device_id``, ``token``), and a tool that must run first often
takes the same one (``verify_account(account_id)`` before ``transfer(account_id, amount)``). Mined preconditions
mostly come from methods on one receiver (``lock.acquire()`` ... ``lock.write()``: two thirds of the mined
precondition pairs share a class, against 0.5% of the none pairs), so shown as mined the model can learn "same
class prefix", a cue no tool set has. ``receiver`` shows the receiver as the first input, so the cue it learns is
the one catalogs show: an input both tools take.

**Docs without parameters** (``--parameter-dropout``): a share of the training pairs shown with neither doc's
inputs or outputs, name and description only, as UltraTool's and TMDB's tools are: every mined pair declares its
parameters, so without it the model never practises on such docs before finetuning.

Both are off by default: measured over three seeds, neither helped at the CPU budget (bench/RESULTS.md, "Methods
shown as tools" and "Docs without parameters in pretraining").
"""
from __future__ import annotations

import random
import re
from dataclasses import replace

from schemas.docs import canonical_doc_json, parse_doc

METHOD_DOCS = ("qualified", "receiver")  # train-discriminator --method-docs
EXTRA_VIEWS = ("description", "as_published")  # train-discriminator --finetune-extra-view

_METHOD = re.compile(r"^(?P<cls>[A-Za-z_]\w*)\.(?P<method>[A-Za-z_]\w*)$")
_WORD_BREAK = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def receiver_name(class_name: str) -> str:
    """``XMLWriter`` -> ``xml_writer``, ``_spbase`` -> ``spbase``, ``DiGraph`` -> ``di_graph``."""
    return _WORD_BREAK.sub("_", class_name.lstrip("_")).lower() or class_name.lower()


def receiver_as_input(doc_json: str) -> str:
    """A method's doc (name ``Class.method``) as a tool: name ``method``, the receiver (named after its class,
    typed with it) the first input. Any other doc, and text that is not a doc, is returned unchanged."""
    doc = parse_doc(doc_json)
    match = _METHOD.match(doc.get("name", "")) if doc is not None else None
    if match is None:
        return doc_json
    receiver = receiver_name(match["cls"])
    inputs = list(doc.get("input_params") or [])
    if all(p.get("name") != receiver for p in inputs):
        inputs.insert(0, {"description": "", "name": receiver, "type": match["cls"]})
    return canonical_doc_json({**doc, "name": match["method"], "input_params": inputs,
                               "output_params": doc.get("output_params") or []})


def method_doc_view(doc_json: str, method_docs: str) -> str:
    """``doc_json`` as ``method_docs`` shows it (one of ``METHOD_DOCS``)."""
    if method_docs == "qualified":
        return doc_json
    if method_docs == "receiver":
        return receiver_as_input(doc_json)
    raise ValueError(f"method docs {method_docs!r}: one of {', '.join(METHOD_DOCS)}")


def trained_method_docs(calibration: dict | None) -> str:
    """The view a checkpoint was trained with, from its calibration.json (``qualified`` before the option)."""
    return (calibration or {}).get("method_docs", "qualified")


def shown_as(examples: list, method_docs: str) -> list:
    """``PairExample``s with both docs as ``method_docs`` shows them."""
    if method_docs == "qualified":
        return list(examples)
    return [replace(e, doc_a=method_doc_view(e.doc_a, method_docs), doc_b=method_doc_view(e.doc_b, method_docs))
            for e in examples]


def without_parameters(doc_json: str) -> str:
    """The doc with no inputs and no outputs (name and description only). Text that is not a doc is returned
    unchanged."""
    doc = parse_doc(doc_json)
    if doc is None or not (doc.get("input_params") or doc.get("output_params")):
        return doc_json
    return canonical_doc_json({**doc, "input_params": [], "output_params": []})


def drop_parameters(examples: list, share: float, seed: int) -> list:
    """``examples`` with a seeded ``share`` of them shown without parameters on both docs (``without_parameters``)."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"parameter dropout {share}: must lie in [0, 1]")
    if not share:
        return list(examples)
    rng = random.Random(seed)
    return [replace(e, doc_a=without_parameters(e.doc_a), doc_b=without_parameters(e.doc_b)) if rng.random() < share
            else e for e in examples]
