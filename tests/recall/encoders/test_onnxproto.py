"""The ONNX rewrite for onnxruntime's integer kernels (recall/encoders/onnxproto.py): what it
changes in the minilm graph, that one rewritten product is exactly the numpy pass's
(``minilm._linear``), and its refusal of a graph it does not know."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests.support.extras import needs_minilm
from truss_files.recall.encoders import onnxproto
from truss_files.recall.encoders.minilm import _linear
from truss_files.recall.encoders.onnxproto import (
    ZERO_POINT,
    _bytes_field,
    _int_field,
    _node,
    _tensor,
    _unsigned,
    integer_graph,
    onnx_tensors,
)


def _value_info(name: str, dims: tuple[str | int, ...]) -> bytes:
    """A float tensor's ValueInfoProto: name (1), type (2) -> tensor_type (1) -> elem_type
    (1), shape (2) -> dim (1) -> dim_value (1) or dim_param (2)."""
    shape = b"".join(
        _bytes_field(1, _bytes_field(2, d.encode()) if isinstance(d, str) else _int_field(1, d))
        for d in dims
    )
    tensor_type = _int_field(1, 1) + _bytes_field(2, shape)
    return _bytes_field(1, name.encode()) + _bytes_field(2, _bytes_field(1, tensor_type))


def one_product(weight: Any, scale: Any, bias: Any) -> bytes:
    """A model of one ``DynamicQuantizeMatMul`` node, written as ``integer_graph`` writes it."""
    rows, columns = weight.shape
    graph = _bytes_field(
        1,
        _node("DynamicQuantizeMatMul", ["A", "B", "S", ZERO_POINT, "bias"], ["Y"], "com.microsoft"),
    )
    graph += _bytes_field(5, _tensor("B", (rows, columns), _unsigned(weight.tobytes()), 2))
    graph += _bytes_field(5, _tensor("S", (columns,), scale.tobytes()))
    graph += _bytes_field(5, _tensor(ZERO_POINT, (), bytes([128]), 2))
    graph += _bytes_field(5, _tensor("bias", (columns,), bias.tobytes()))
    graph += _bytes_field(11, _value_info("A", ("n", rows)))
    graph += _bytes_field(12, _value_info("Y", ("n", columns)))
    opsets = _bytes_field(8, _int_field(2, 17))
    opsets += _bytes_field(8, _bytes_field(1, b"com.microsoft") + _int_field(2, 1))
    return _int_field(1, 8) + _bytes_field(7, graph) + opsets


@needs_minilm
def test_one_integer_product_is_exactly_the_numpy_pass() -> None:
    """onnxruntime's kernel and ``_linear`` compute the same integers and the same scaling:
    equal to the last bit, on inputs with and without negative values and with an outlier."""
    import numpy as np
    import onnxruntime as ort

    rng = np.random.default_rng(7)
    weight = rng.integers(-127, 128, (384, 96)).astype(np.int8)
    scale = (rng.random(96) * 0.01).astype(np.float32)
    bias = rng.standard_normal(96).astype(np.float32)
    session = ort.InferenceSession(one_product(weight, scale, bias))
    inputs = [
        (rng.standard_normal((7, 384)) * 3 + 0.5).astype(np.float32),
        rng.random((1, 384)).astype(np.float32) + 0.1,  # all positive: zero point 0
        np.concatenate([rng.standard_normal((5, 384)), [[40.0] * 384]]).astype(np.float32),
    ]
    for a in inputs:
        ours = _linear(a.copy(), weight.astype(np.float32), scale, bias)
        assert np.array_equal(session.run(None, {"A": a})[0], ours)
        floats = a @ (weight.astype(np.float32) * scale) + bias
        assert 0 < np.abs(ours - floats).max() < 0.05 * np.abs(floats).max()


@needs_minilm
def test_the_minilm_graph_computes_its_weight_products_in_integers() -> None:
    from truss_files.recall.encoders.modelfiles import minilm_files

    found = minilm_files()
    assert found is not None
    data = found[0].read_bytes()
    before = Counter(op for op, _ in onnx_tensors(data)[1])
    tensors, nodes = onnx_tensors(integer_graph(data))
    after = Counter(op for op, _ in nodes)
    # 6 layers x (query, key and value as one, output, two feed-forward) weight products;
    # the two MatMuls left per layer are attention's (scores and context): no weights.
    assert after["DynamicQuantizeMatMul"] == 24 and after["MatMul"] == 12
    assert after["Split"] == before["Split"] + 6  # query, key and value apart again
    assert after["Gelu"] == 6 and after["Erf"] == 0
    assert before["MatMul"] == 48 and before["Erf"] == 6
    # The embedding tables are still dequantized in the graph: a lookup, not a product.
    assert after["Cast"] == before["Cast"] - 36
    assert tensors[ZERO_POINT] == ("uint8", (), bytes([128]))
    fused = [names for op, names in nodes if op == "DynamicQuantizeMatMul" and "+" in names[1]]
    assert len(fused) == 6
    assert tensors[fused[0][1]][:2] == ("uint8", (384, 3 * 384))
    assert tensors[fused[0][2]][:2] == ("float32", (3 * 384,))


def test_a_graph_without_int8_weights_is_refused() -> None:
    node = _node("MatMul", ["a", "w"], ["y"])
    model = _bytes_field(
        7, _bytes_field(1, node) + _bytes_field(5, _tensor("w", (2, 2), bytes(16)))
    )
    with pytest.raises(ValueError, match="not the minilm export"):
        integer_graph(model)
    assert onnxproto.onnx_tensors(model)[1] == [("MatMul", ["a", "w", "y"])]
