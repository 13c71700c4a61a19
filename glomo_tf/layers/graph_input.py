"""The graphs a :class:`~glomo_tf.GraphMixture` reads, in one type: four forms, parsed once."""

import dataclasses

FORMS = ("dense", "top_k", "candidates", "packed_candidates")
LAYOUTS = {
    "dense": "graphs [batch, 2, L, K, T, T]",
    "top_k": "(indices, weights), both [batch, 2, L, K, T, k] (glomo_tf.ops.top_k_sources)",
    "candidates": "{'candidates': [batch, 2, T, C, T]}",
    "packed_candidates": "{'packed_candidates': [batch, T, C, T]}",
}
_RANKS = {"dense": (6,), "top_k": (6, 6), "candidates": (5,), "packed_candidates": (4,)}


@dataclasses.dataclass(frozen=True)
class GraphInput:
    """Graphs in one of four forms, read from the value a user passes (or its shapes):

    * ``"dense"``: a tensor ``[batch, 2, L, K, T, T]`` (a :class:`~glomo_tf.GraphPredictor`'s);
    * ``"top_k"``: ``(indices, weights)``, both ``[batch, 2, L, K, T, k]``: each receiving
      unit's ``k`` heaviest sources (:func:`glomo_tf.ops.top_k_sources`);
    * ``"candidates"``: ``{"candidates": [batch, 2, T, C, T]}``, the mixture's candidate matrices
      formed beforehand (:meth:`glomo_tf.GraphMixture.candidate_matrices`);
    * ``"packed_candidates"``: ``{"packed_candidates": [batch, T, C, T]}``, the same with both
      directions in one matrix.

    :meth:`parse` checks the structure and the ranks once, at the boundary of the layer that
    takes the graphs (:class:`~glomo_tf.GraphMixture`, :class:`~glomo_tf.GlomoTransfer`, the
    graph cache's fed model); the layers then dispatch on :attr:`form`. The graph cache writes
    its batches with :meth:`value`, in the form the layers parse.

    Attributes:
        form: one of :data:`FORMS`.
        parts: the tensors (or shapes): one, or ``(indices, weights)`` for ``"top_k"``.

    Example:

    >>> import numpy as np
    >>> graphs = GraphInput.parse((np.zeros((1, 2, 3, 4, 5, 2), "int32"),
    ...                            np.zeros((1, 2, 3, 4, 5, 2), "float32")))
    >>> graphs.form, graphs.layers_heads
    ('top_k', (3, 4))
    """

    form: str
    parts: tuple

    @classmethod
    def parse(cls, value, expected="graphs"):
        """The :class:`GraphInput` of ``value`` (returned as it is when it is one already):
        tensors, or their shapes (tuples of dims, as ``build`` gets them). Raises ``ValueError``
        naming the four forms for anything else (``expected``: what the caller takes, for the
        message)."""
        if isinstance(value, GraphInput):
            return value
        if isinstance(value, dict):
            if len(value) != 1 or not set(value) <= {"candidates", "packed_candidates"}:
                raise ValueError(f"expected {expected}: a dict of graphs must be "
                                 f"{LAYOUTS['candidates']} or {LAYOUTS['packed_candidates']}; "
                                 f"got keys {sorted(value)}.")
            (form, part), = value.items()
            parts = (part,)
        elif _is_pair(value):
            form, parts = "top_k", tuple(value)
        else:
            form, parts = "dense", (value,)
        ranks = tuple(len(shape_of(part)) for part in parts)
        if ranks != _RANKS[form]:
            raise ValueError(
                f"expected {expected}: {'; '.join(LAYOUTS.values())}; got "
                f"{'shapes' if len(parts) > 1 else 'shape'} "
                f"{', '.join(str(shape_of(p)) for p in parts)}.")
        if form == "candidates" and shape_of(parts[0])[1] not in (2, None):
            raise ValueError(f"candidates must be [batch, 2, T, C, T]; got shape "
                             f"{shape_of(parts[0])}.")
        return cls(form, parts)

    @property
    def shape(self):
        """The first part's shape (a tuple of dims)."""
        return shape_of(self.parts[0])

    @property
    def layers_heads(self):
        """``(L, K)`` of the dense and top-k forms; None for candidate matrices."""
        return tuple(self.shape[2:4]) if self.form in ("dense", "top_k") else None

    @property
    def candidates(self):
        """``C`` of the candidate forms (the matrices per direction); None otherwise."""
        return self.shape[-2] if self.form in ("candidates", "packed_candidates") else None

    def value(self):
        """The value as a user passes it: the tensor, the pair, or the dict."""
        if self.form == "dense":
            return self.parts[0]
        if self.form == "top_k":
            return tuple(self.parts)
        return {self.form: self.parts[0]}


def shape_of(part):
    """A tensor's shape, or a shape itself, as a tuple of dims (the layers' ``build`` and
    ``call`` read their inputs both ways)."""
    return tuple(part.shape) if hasattr(part, "shape") else tuple(part)


def _is_pair(value):
    """Whether ``value`` is the top-k pair (two tensors, or two shapes), not one tensor."""
    return isinstance(value, (list, tuple)) and len(value) == 2 and all(
        hasattr(part, "shape") or isinstance(part, (list, tuple)) for part in value)
