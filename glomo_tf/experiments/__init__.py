"""The experiments of the project, apart from the library: the runners behind the ``glomo``
commands, each on a run directory it can resume (:mod:`.runs`).

* :mod:`.pretraining`: ``glomo pretrain`` (GLoMo pretraining on a corpus);
* :mod:`.sentence_pretraining`: ``glomo sentence-pretrain`` (QT / SP / G2L);
* :mod:`.transfer`: ``glomo transfer``, the paired comparisons of downstream variants (its
  settings, and the dispatch to a task's runner): :mod:`.classification` (single texts),
  :mod:`.pairs` (sentence pairs), :mod:`.reading` (``--dataset squad``);
* :mod:`.probe`: ``glomo probe`` (the SentEval-style probe);
* :mod:`.demo`: ``glomo demo`` (the planted corpus);
* :mod:`.search`: ``glomo tune`` (KerasTuner searches);
* :mod:`.runs`: the shared scaffolding: run directories (settings saved and checked on
  resuming), and the comparisons' splits, fitting and results files.
"""
