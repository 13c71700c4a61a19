"""Data for glomo_tf: the built-in planted corpus (and text pipelines)."""

from glomo_tf.data.planted import (PlantedCorpus, PlantedVocabulary, builtin_corpus, chance_level,
                                   edge_recovery, generate_planted_corpus, positional_baseline,
                                   same_type_chance)

__all__ = ["PlantedCorpus", "PlantedVocabulary", "builtin_corpus", "chance_level", "edge_recovery",
           "generate_planted_corpus", "positional_baseline", "same_type_chance"]
from glomo_tf.data.corpus import (check_vocabulary_matches, count_undecodable,  # noqa: E402,F401
                                  pretraining_datasets, text_lines, tfds_lines, windows)
from glomo_tf.data.vocabulary import Tokenizer, Vocabulary  # noqa: E402,F401
from glomo_tf.data.labeled import (kfold_splits, load_labeled_text, load_mr,  # noqa: E402,F401
                                   load_sst, load_subj, load_tfds_text, seeded_split,
                                   shared_data_dir)
