"""The Request: typed records, each checked at construction, built by the CLI and the API through one function."""

import pytest
from clitools import assert_one_line_error, invoke

from qkv_cli.errors import QkvError
from qkv_cli.pipeline.request import FIELDS, RECORDS, Checkpoint, Generation, Keep, Request


def test_each_flat_name_lands_in_its_record():
    req = Request.of(text="a cat", model="m", layers=(0, -1), generate=3, sample_seed=7, method="rollout",
                     head_fusion="max", attention="cross", max_memory=1 << 30, rows="-4:")  # fmt: skip
    assert req.inputs.text == "a cat" and req.checkpoint == Checkpoint(name="m")
    assert req.keep == Keep(layers=(0, -1), rows="-4:")
    assert req.generation == Generation(tokens=3, seed=7)
    assert (req.attribution.method, req.attribution.head_fusion) == ("rollout", "max")
    assert req.encdec.attention == "cross" and req.limits.max_memory == 1 << 30
    assert req.settings == Request().settings  # untouched records keep their defaults


def test_every_record_field_has_one_flat_name():
    """FIELDS covers each field of each record once (a new field cannot be missed by Request.of)."""
    reached = {(record, attr) for record, attr in FIELDS.values()}
    every = {(name, f) for name, cls in RECORDS.items() if name != "settings" for f in cls.__dataclass_fields__}
    assert reached - {("settings", None)} == every and len(FIELDS) == len(reached)


def test_changed_copies_and_checks_again():
    req = Request.of(text="a", layers=(1,))
    other = req.changed(layers=(2,), predict=True)
    assert req.keep.layers == (1,) and other.keep.layers == (2,) and other.readout.predict
    assert other.inputs is req.inputs  # records that did not change are shared, not copied
    with pytest.raises(QkvError, match="--generate must be a whole number"):
        req.changed(generate=-1)
    with pytest.raises(TypeError, match="no field 'layer'"):
        req.changed(layer=(1,))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"method": "saliency"}, "unknown --method 'saliency': choose one of rollout, value-norm, value-zeroing"),
        ({"method": "value-norm", "head_fusion": "max"}, "--head-fusion is for --method rollout: value-norm"),
        ({"head_fusion": "max"}, "--head-fusion is for --method rollout: give --method rollout"),
        ({"method": "rollout", "head_fusion": "sum"}, "unknown --head-fusion 'sum'"),
        ({"attention": "self"}, "unknown --attention 'self': choose one of encoder, decoder, cross"),
        ({"temperature": float("nan")}, "--temperature must be a finite number"),
        ({"top_k": True}, "--top-k must be a whole number"),
        ({"layers": (0, 1.5)}, "--layer must be whole numbers"),
        ({"heads": (-1,)}, "--head must be a whole number of at least 0"),
        ({"max_memory": 0}, "--max-memory must be a whole number of at least 1"),
        ({"text": 3}, "text must be a str, got int"),
        ({"batch": "yes"}, "batch must be True or False"),
    ],
)
def test_a_bad_field_is_refused_at_construction(fields, message):
    with pytest.raises(QkvError, match=message.replace("(", r"\(")):
        Request.of(**fields)


def test_a_record_of_the_wrong_type_is_refused():
    with pytest.raises(QkvError, match="Request.keep must be a Keep, got Generation"):
        Request(keep=Generation())


def test_the_cli_and_the_api_refuse_alike():
    """One builder: the same bad value gives the same one-line message through both doors."""
    import qkv_cli as qkv

    with pytest.raises(QkvError) as api:
        qkv.attribute("a cat sat", method="value-norm", head_fusion="max")
    line = assert_one_line_error(invoke(["attribute", "a cat sat", "--method", "value-norm", "--head-fusion", "max"]))
    assert line == f"qkv: error: {api.value}"
