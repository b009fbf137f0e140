"""The ONNX file read and rewritten as protobuf bytes, without the ``onnx`` package.

Two readers: the numpy pass takes the minilm file's weights from it (``onnx_tensors``), and
onnxruntime runs a rewrite of it (``integer_graph``). The file is a plain BERT export whose
int8 weights are dequantized inside the graph (``Cast`` then ``Mul`` by a per-column scale);
onnxruntime folds that into float32 weights and runs float matrix products: 44 MB of weights
streamed through the cache for every pass, so a one-row query costs as much as a short batch.
``integer_graph`` keeps the int8 weights as they are and computes every weight product with
onnxruntime's integer kernel (``com.microsoft.DynamicQuantizeMatMul``: the activations are
quantized to uint8 per pass, ``(x_q - zp) @ W_q`` in int32, times both scales, plus the
bias folded in; a layer's query, key and value as one product and a ``Split``), and the
GELU's five nodes as one (``com.microsoft.Gelu``). The weights go in as uint8 with zero point
128 (the same integers): onnxruntime's uint8-by-int8 kernel on AVX2 without VNNI sums pairs of
products in int16 and saturates, which moved vectors by up to 0.025 in cosine and would make
them depend on the CPU. Measured in ``docs/recall-quality.md``.

Quantizing the activations changes the vectors (cosine about 0.99 against the float graph),
so the numpy pass computes the same arithmetic (``minilm.Encoder``) and the fingerprint names
it (``minilm.VECTOR_FORMAT``).

A protobuf message is a run of fields (a varint key: field number and wire type); a rewrite
copies every field it does not change and re-encodes the ones it does, so this needs only a
reader (``_fields``) and a writer (``_key``/``_bytes_field``) of the four wire types used.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any, Final, NamedTuple

__all__ = ["integer_graph", "onnx_tensors"]

MS_DOMAIN: Final = "com.microsoft"
SQRT2: Final = 2**0.5
ZERO_POINT: Final = "truss/uint8-zero-point-128"
_SHIFT: Final = bytes((byte + 128) & 0xFF for byte in range(256))


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


def _fields(data: bytes, start: int, end: int) -> Iterator[tuple[int, int, Any]]:
    """``(field number, wire type, value)`` of one protobuf message: an int for varints, a
    ``(start, end)`` span for length-delimited fields."""
    at = start
    while at < end:
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
            yield number, wire, value
        elif wire == 2:
            size, at = _varint(data, at)
            yield number, wire, (at, at + size)
            at += size
        elif wire == 5:
            yield number, wire, None
            at += 4
        elif wire == 1:
            yield number, wire, None
            at += 8
        else:
            raise ValueError(f"protobuf wire type {wire} at byte {at}")


_ONNX_DTYPES: Final = {1: "float32", 2: "uint8", 3: "int8", 7: "int64", 9: "bool"}


def onnx_tensors(
    data: bytes,
) -> tuple[dict[str, tuple[str, tuple[int, ...], bytes]], list[tuple[str, list[str]]]]:
    """The initializers (``name -> (dtype, dims, raw bytes)``) and the nodes (``(op type,
    inputs + outputs)``, in graph order) of an ONNX model: ModelProto.graph (7), its nodes (1:
    inputs 1, outputs 2, op_type 4) and initializers (5: TensorProto dims 1, data_type 2,
    name 8, raw_data 9)."""
    graph = next((v for n, w, v in _fields(data, 0, len(data)) if n == 7 and w == 2), None)
    if graph is None:
        raise ValueError("no graph")
    tensors: dict[str, tuple[str, tuple[int, ...], bytes]] = {}
    nodes: list[tuple[str, list[str]]] = []
    for number, wire, value in _fields(data, *graph):
        if wire != 2:
            continue
        if number == 1:
            op = ""
            names: list[str] = []
            for n, w, v in _fields(data, *value):
                if w == 2 and n in (1, 2):
                    names.append(data[v[0] : v[1]].decode())
                elif w == 2 and n == 4:
                    op = data[v[0] : v[1]].decode()
            nodes.append((op, names))
        elif number == 5:
            dims: list[int] = []
            dtype = 0
            name = ""
            raw = b""
            for n, w, v in _fields(data, *value):
                if n == 1 and w == 0:
                    dims.append(v)
                elif n == 1 and w == 2:
                    at = v[0]
                    while at < v[1]:
                        dim, at = _varint(data, at)
                        dims.append(dim)
                elif n == 2 and w == 0:
                    dtype = v
                elif n == 8 and w == 2:
                    name = data[v[0] : v[1]].decode()
                elif n == 9 and w == 2:
                    raw = data[v[0] : v[1]]
            if dtype in _ONNX_DTYPES:
                tensors[name] = (_ONNX_DTYPES[dtype], tuple(dims), raw)
    return tensors, nodes


# -- the writer ------------------------------------------------------------------------------


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _bytes_field(number: int, payload: bytes) -> bytes:
    return _uvarint(number << 3 | 2) + _uvarint(len(payload)) + payload


def _int_field(number: int, value: int) -> bytes:
    return _uvarint(number << 3) + _uvarint(value)


def _copy(data: bytes, number: int, wire: int, value: Any) -> bytes:
    if wire == 2:
        return _bytes_field(number, data[value[0] : value[1]])
    if wire == 0:
        return _int_field(number, value)
    # ModelProto and GraphProto have no fixed-width fields of their own.
    raise ValueError(f"protobuf wire type {wire} in field {number} cannot be copied")


def _node(op: str, inputs: list[str], outputs: list[str], domain: str = "") -> bytes:
    """A NodeProto: inputs (1), outputs (2), op_type (4), domain (7)."""
    out = b"".join(_bytes_field(1, name.encode()) for name in inputs)
    out += b"".join(_bytes_field(2, name.encode()) for name in outputs)
    out += _bytes_field(4, op.encode())
    return out + (_bytes_field(7, domain.encode()) if domain else b"")


def _tensor(name: str, dims: tuple[int, ...], raw: bytes, dtype: int = 1) -> bytes:
    """A TensorProto: dims (1), data_type (2: 1 float32, 2 uint8, 7 int64), name (8),
    raw_data (9)."""
    out = b"".join(_int_field(1, dim) for dim in dims) + _int_field(2, dtype)
    return out + _bytes_field(8, name.encode()) + _bytes_field(9, raw)


# -- the rewrite -----------------------------------------------------------------------------


def _node_parts(data: bytes, span: tuple[int, int]) -> tuple[str, list[str], list[str]]:
    op, inputs, outputs = "", [], []
    for number, wire, value in _fields(data, *span):
        if wire != 2 or number not in (1, 2, 4):
            continue
        text = data[value[0] : value[1]].decode()
        if number == 1:
            inputs.append(text)
        elif number == 2:
            outputs.append(text)
        elif number == 4:
            op = text
    return op, inputs, outputs


def _tensor_name(data: bytes, span: tuple[int, int]) -> str:
    """A TensorProto's name (field 8)."""
    for number, wire, value in _fields(data, *span):
        if number == 8 and wire == 2:
            return data[value[0] : value[1]].decode()
    return ""


class _Product(NamedTuple):
    """A weight product of the graph: its node, int8 weight (name, shape, bytes), per-column
    scale and bias (raw float32; None: no bias ``Add`` to fold) and the output it makes."""

    at: int
    weight: str
    rows: int
    columns: int
    values: bytes
    scale: bytes
    bias: bytes | None
    output: str


def _unsigned(raw: bytes) -> bytes:
    """int8 values as uint8 ones with zero point 128: the same integers, ``q + 128 - 128``."""
    return raw.translate(_SHIFT)


def integer_graph(data: bytes) -> bytes:
    """The model ``data`` with every ``MatMul`` by a ``Cast``/``Mul``-dequantized int8 weight
    (per-column scale) as one ``DynamicQuantizeMatMul`` over the same integers as uint8 (zero
    point 128; its bias ``Add`` folded in) -- products that read one input (a layer's query,
    key and value) as one product and a ``Split`` -- and every exact GELU (``x * 0.5 * (1 +
    erf(x / sqrt 2))``) as one ``Gelu``; initializers no node reads any more are left out.
    ValueError when the graph has no such weight (not the export this rewrite knows)."""
    tensors, _ = onnx_tensors(data)
    model = list(_fields(data, 0, len(data)))
    graph = next(value for number, wire, value in model if number == 7 and wire == 2)
    fields = list(_fields(data, *graph))
    nodes = {
        at: _node_parts(data, value)
        for at, (number, wire, value) in enumerate(fields)
        if number == 1 and wire == 2
    }
    made_by = {outputs[0]: at for at, (_, _, outputs) in nodes.items() if outputs}
    users: dict[str, list[int]] = {}
    for at, (_, inputs, _) in nodes.items():
        for name in inputs:
            users.setdefault(name, []).append(at)

    def sole_user(name: str, op: str) -> int | None:
        found = users.get(name, [])
        return found[0] if len(found) == 1 and nodes[found[0]][0] == op else None

    def made_by_op(name: str, op: str) -> int | None:
        at = made_by.get(name)
        return at if at is not None and nodes[at][0] == op else None

    def scalar(name: str) -> float | None:
        found = tensors.get(name)
        if found is None or found[0] != "float32" or len(found[2]) != 4:
            return None
        return float(struct.unpack("<f", found[2])[0])

    drop: set[int] = set()
    replace: dict[int, bytes] = {}
    extra: list[bytes] = []
    products: dict[str, list[_Product]] = {}  # by input
    after: dict[int, bytes] = {}  # a node to write right after another (graph order)
    for at, (op, inputs, outputs) in nodes.items():
        if op != "MatMul" or len(inputs) != 2 or sole_user(inputs[1], "MatMul") is None:
            continue
        mul = made_by_op(inputs[1], "Mul")
        cast = None if mul is None else made_by_op(nodes[mul][1][0], "Cast")
        if mul is None or cast is None:
            continue
        weight, scale = nodes[cast][1][0], nodes[mul][1][1]
        if tensors.get(weight, ("",))[0] != "int8" or scale not in tensors:
            continue
        rows, columns = tensors[weight][1]
        if len(tensors[scale][2]) != 4 * columns:  # a per-column scale, not a per-tensor one
            continue
        bias, output = None, outputs[0]
        add = sole_user(output, "Add")
        if add is not None:
            summands = nodes[add][1]
            named = summands[1] if summands[0] == output else summands[0]
            if tensors.get(named, ("", ()))[1] == (columns,):
                bias, output = tensors[named][2], nodes[add][2][0]
                drop.add(add)
        drop.update((mul, cast))
        products.setdefault(inputs[0], []).append(
            _Product(at, weight, rows, columns, tensors[weight][2], tensors[scale][2], bias, output)
        )
    for source, group in products.items():
        # A layer's query, key and value read one input: one product over their weights side
        # by side, then a Split (one quantization of the input, one larger product).
        fused = len(group) > 1 and all(
            g.bias is not None and g.rows == group[0].rows for g in group
        )
        parts = [group] if fused else [[g] for g in group]
        for part in parts:
            first = part[0]
            name = f"truss/{first.weight}" + ("+" if len(part) > 1 else "")
            columns = sum(g.columns for g in part)
            values = b"".join(
                g.values[row * g.columns : (row + 1) * g.columns]
                for row in range(first.rows)
                for g in part
            )
            extra.append(_tensor(f"{name}/u8", (first.rows, columns), _unsigned(values), 2))
            extra.append(_tensor(f"{name}/scale", (columns,), b"".join(g.scale for g in part)))
            args = [source, f"{name}/u8", f"{name}/scale", ZERO_POINT]
            if all(g.bias is not None for g in part):
                extra.append(
                    _tensor(f"{name}/bias", (columns,), b"".join(g.bias or b"" for g in part))
                )
                args.append(f"{name}/bias")
            if len(part) == 1:
                replace[first.at] = _node("DynamicQuantizeMatMul", args, [first.output], MS_DOMAIN)
                continue
            replace[first.at] = _node("DynamicQuantizeMatMul", args, [f"{name}/out"], MS_DOMAIN)
            sizes = struct.pack(f"<{len(part)}q", *(g.columns for g in part))
            extra.append(_tensor(f"{name}/sizes", (len(part),), sizes, 7))
            axis = _bytes_field(1, b"axis") + _int_field(3, 2**64 - 1) + _int_field(20, 2)  # -1
            split = _node("Split", [f"{name}/out", f"{name}/sizes"], [g.output for g in part])
            after[first.at] = split + _bytes_field(5, axis)
            drop.update(g.at for g in part[1:])
    if not replace:
        raise ValueError("no int8 weight dequantized by Cast and Mul: not the minilm export")
    extra.append(_tensor(ZERO_POINT, (), bytes([128]), 2))
    for at, (op, inputs, outputs) in nodes.items():
        if op != "Erf":
            continue
        div = made_by_op(inputs[0], "Div")
        if div is None or abs((scalar(nodes[div][1][1]) or 0.0) - SQRT2) > 1e-6:
            continue
        x = nodes[div][1][0]
        plus = sole_user(outputs[0], "Add")
        half = None if plus is None else sole_user(nodes[plus][2][0], "Mul")
        times = None if half is None else sole_user(nodes[half][2][0], "Mul")
        if plus is None or half is None or times is None or x not in nodes[times][1]:
            continue
        if {scalar(n) for n in nodes[plus][1] + nodes[half][1]} != {None, 1.0, 0.5}:
            continue
        replace[div] = _node("Gelu", [x], [nodes[times][2][0]], MS_DOMAIN)
        drop.update((at, plus, half, times))
    # What the rewritten nodes read: an initializer none reads (the int8 weights now held as
    # uint8, their scales, the folded biases, the GELU's constants) is left out.
    kept = [
        replace.get(at) or data[fields[at][2][0] : fields[at][2][1]]
        for at in nodes
        if at not in drop
    ]
    read = {
        name for node in [*kept, *after.values()] for name in _node_parts(node, (0, len(node)))[1]
    }
    body = bytearray()
    for at, (number, wire, value) in enumerate(fields):
        if at in drop or (number == 5 and _tensor_name(data, value) not in read):
            continue
        body += _bytes_field(1, replace[at]) if at in replace else _copy(data, number, wire, value)
        if at in after:
            body += _bytes_field(1, after[at])
    for tensor in extra:
        body += _bytes_field(5, tensor)
    out = bytearray()
    for number, wire, value in model:
        out += (
            _bytes_field(7, bytes(body))
            if number == 7 and wire == 2
            else _copy(data, number, wire, value)
        )
    # opset_import (8): the contrib operators' domain, version 1.
    out += _bytes_field(8, _bytes_field(1, MS_DOMAIN.encode()) + _int_field(2, 1))
    return bytes(out)
