"""The experiments of the project, apart from the library: the runners behind the ``glomo``
commands, each on a run directory it can resume (:mod:`.runs`).

* :mod:`.pretraining`: ``glomo pretrain`` (GLoMo pretraining on a corpus);
* :mod:`.sentence_pretraining`: ``glomo sentence-pretrain`` (QT / SP / G2L);
* :mod:`.transfer`: ``glomo transfer``, the paired comparisons of downstream variants;
* :mod:`.reading`: ``glomo transfer --dataset squad``;
* :mod:`.probe`: ``glomo probe`` (the SentEval-style probe);
* :mod:`.demo`: ``glomo demo`` (the planted corpus);
* :mod:`.search`: ``glomo tune`` (KerasTuner searches);
* :mod:`.runs`: run directories: settings saved and checked on resuming.
"""
