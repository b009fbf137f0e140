"""The minilm model run by onnxruntime: the same vectors as the numpy pass, faster in batches.

``OrtEncoder.encode`` meets ``minilm.Encoder.encode``: token lists in, unit vectors out (the
graph's last hidden state, mean over the real tokens, L2). The ONNX file's int8 weights are
dequantized in the graph (``Cast`` then ``Mul``) and computed in float32, so its vectors agree
with the numpy pass to float rounding (cosine 1 - 2e-7 on LoCoMo turns); the fingerprint, and
so the vector cache, is the same for both.

Why both: the numpy pass maps its weights in one ``mmap`` (a cold process pays nothing to load
it), onnxruntime costs its import and a session build (hundreds of ms) and then embeds a batch
about twice as fast per CPU second (``docs/recall-quality.md``). So batches of notes (``index``,
a write in a long-lived process) go through onnxruntime when it is installed, and a query goes
through it once the process has built the session; a cold query never builds it.

One intra-op thread: on a 2-core machine shared with other work a second thread was slower (it
spins and waits on a core another process holds), measured in ``docs/recall-quality.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from .modelfiles import _find

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["THREADS", "OrtEncoder", "available"]

THREADS: Final = 1


def available() -> bool:
    """Whether onnxruntime is installed (never imports it)."""
    return _find("onnxruntime") is not None


class OrtEncoder:
    """An onnxruntime session over the minilm ONNX file, built on the first ``encode``."""

    def __init__(self, model_file: Path, threads: int = THREADS) -> None:
        self.model_file = model_file
        self.threads = threads
        self._session: Any = None

    @property
    def ready(self) -> bool:
        """Whether the session is built (a query uses it only then)."""
        return self._session is not None

    def session(self) -> Any:
        if self._session is None:
            import onnxruntime as ort

            options = ort.SessionOptions()
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
            options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            options.log_severity_level = 3
            # Waiting threads spin by default: on shared cores that is time taken from others.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            self._session = ort.InferenceSession(
                str(self.model_file), options, providers=["CPUExecutionProvider"]
            )
        return self._session

    def encode(self, batch: Sequence[Sequence[int]]) -> npt.NDArray[np.float32]:
        """One unit vector per token list (mean over its tokens, then L2)."""
        import numpy as np

        n = len(batch)
        width = max(len(ids) for ids in batch)
        ids = np.zeros((n, width), dtype=np.int64)
        mask = np.zeros((n, width), dtype=np.int64)
        for row, tokens in enumerate(batch):
            ids[row, : len(tokens)] = tokens
            mask[row, : len(tokens)] = 1
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = self.session().run(None, feed)[0]
        weights = mask.astype(np.float32)
        pooled = (
            np.einsum("nwd,nw->nd", hidden, weights) / np.maximum(weights.sum(axis=1), 1.0)[:, None]
        )
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return np.asarray(pooled / np.where(norms > 0, norms, 1.0), dtype=np.float32)
