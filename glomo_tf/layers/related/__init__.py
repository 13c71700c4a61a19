"""Layers of the related models compared with GLoMo, kept apart from GLoMo's own layers.

* :class:`ContextualizedNonLocal` and :class:`LinearChainCRF`: CN3 (Liu et al., "Contextualized
  Non-local Neural Networks for Sequence Learning", AAAI 2019);
* :class:`OrderedMemory`: Ordered Memory (Shen et al., "Ordered Memory", NeurIPS 2019), a
  latent-tree sentence encoder; its trees are read by :mod:`glomo_tf.trees`;
* :class:`SentenceEncoder`: the bidirectional-GRU sentence encoder of the thesis' chapter 3
  (Quick Thoughts, Self Prediction, Global-to-Local), trained by
  :class:`~glomo_tf.SentencePretrainer`;
* :class:`SharedPrivateRNN`: the RNN with a shared and a private state ("RNNs with private and
  shared representations for semi-supervised sequence learning").

They are exported by :mod:`glomo_tf.layers` and :mod:`glomo_tf` too; their Keras serialization
names (``glomo_tf>ContextualizedNonLocal`` ...) do not depend on the module they live in.
"""

from glomo_tf.layers.related.cn3 import ContextualizedNonLocal
from glomo_tf.layers.related.crf import LinearChainCRF
from glomo_tf.layers.related.ordered_memory import OrderedMemory
from glomo_tf.layers.related.sentence_encoder import SentenceEncoder
from glomo_tf.layers.related.shared_private_rnn import SharedPrivateRNN

__all__ = ["ContextualizedNonLocal", "LinearChainCRF", "OrderedMemory", "SentenceEncoder",
           "SharedPrivateRNN"]
