"""The minilm model run by onnxruntime with its integer kernels: the numpy pass's vectors,
several times faster.

``OrtEncoder.encode`` meets ``minilm.Encoder.encode``: token lists in, unit vectors out (the
graph's last hidden state, mean over the tokens, L2), each note alone. The session runs
``onnxproto.integer_graph`` of the model file: its int8 weights multiplied by int8-quantized
activations (``DynamicQuantizeMatMul``), which is what the numpy pass computes, so the two
agree to float rounding and share the fingerprint and the vector cache.

Why both: the numpy pass maps its weights in one ``mmap`` (a cold process pays nothing to load
it); onnxruntime costs its import, the rewrite and a session build (about a second) and then
embeds several times faster. So notes (``index``, a write in a long-lived process) go through
onnxruntime when it is installed, and a query goes through it once the process has built the
session; a cold query never builds it.

One intra-op thread per pass: a note is a few dozen rows, too small to split well (a second
intra-op thread cost CPU and bought no wall time, ``docs/recall-quality.md``). A batch of notes
instead runs ``WORKERS`` notes at a time, one per thread (``InferenceSession.run`` is
thread-safe and releases the GIL), so ``index`` can use both cores while a query keeps one.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from .modelfiles import _find
from .onnxproto import integer_graph

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["THREADS", "WORKERS", "OrtEncoder", "available", "session_options"]

THREADS: Final = 1
WORKERS: Final = max(1, min(2, os.cpu_count() or 1))
# Below this many notes a second thread costs more to start than it saves.
PARALLEL_FROM: Final = 8


def available() -> bool:
    """Whether onnxruntime is installed (never imports it)."""
    return _find("onnxruntime") is not None


def session_options(threads: int = THREADS) -> Any:
    """onnxruntime's options for our sessions: ``threads`` intra-op threads, no spinning."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3
    # Waiting threads spin by default: on shared cores that is time taken from others.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


class OrtEncoder:
    """An onnxruntime session over the rewritten minilm graph, built on the first ``encode``."""

    def __init__(self, model_file: Path, threads: int = THREADS, workers: int = WORKERS) -> None:
        self.model_file = model_file
        self.threads = threads
        self.workers = workers
        self._session: Any = None
        self._pool: Any = None

    @property
    def ready(self) -> bool:
        """Whether the session is built (a query uses it only then)."""
        return self._session is not None

    def session(self) -> Any:
        if self._session is None:
            import onnxruntime as ort

            graph = integer_graph(self.model_file.read_bytes())
            self._session = ort.InferenceSession(
                graph, session_options(self.threads), providers=["CPUExecutionProvider"]
            )
        return self._session

    def one(self, tokens: Sequence[int]) -> npt.NDArray[np.float32]:
        """One note's unit vector."""
        import numpy as np

        ids = np.asarray([tokens], dtype=np.int64)
        feed = {
            "input_ids": ids,
            "attention_mask": np.ones_like(ids),
            "token_type_ids": np.zeros_like(ids),
        }
        pooled = self.session().run(None, feed)[0][0].mean(axis=0)
        norm = float(np.linalg.norm(pooled))
        return np.asarray(pooled / (norm if norm > 0 else 1.0), dtype=np.float32)

    def encode(self, batch: Sequence[Sequence[int]]) -> npt.NDArray[np.float32]:
        """One unit vector per token list, each computed alone (``minilm.Encoder``), up to
        ``workers`` at a time."""
        import numpy as np

        self.session()
        if self.workers > 1 and len(batch) >= PARALLEL_FROM:
            if self._pool is None:
                from concurrent.futures import ThreadPoolExecutor

                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="truss-embed")
            rows = list(self._pool.map(self.one, batch))
        else:
            rows = [self.one(tokens) for tokens in batch]
        return np.stack(rows) if rows else np.zeros((0, 0), dtype=np.float32)
