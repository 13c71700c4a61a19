"""Data for glomo_tf: the built-in planted corpus, the tokenizer, corpora and labelled datasets.

The names below load their module on first use: the planted corpus and the labelled-data
readers need only NumPy, the tokenizer and the corpus pipelines TensorFlow and tensorflow-text.
"""

from glomo_tf._lazy import lazy_names

__all__, __getattr__, __dir__ = lazy_names(__name__, {
    "glomo_tf.data.planted": (
        "PlantedCorpus", "PlantedVocabulary", "builtin_corpus", "generate_planted_corpus"),
    "glomo_tf.data.corpus": (
        "check_vocabulary_matches", "count_undecodable", "pretraining_datasets", "text_lines",
        "tfds_lines", "windows"),
    "glomo_tf.data.tokenizer": ("Tokenizer",),
    "glomo_tf.data.units": ("Vocabulary",),
    "glomo_tf.data.labeled": (
        "kfold_splits", "load_labeled_text", "load_mr", "load_sst", "load_subj", "load_tfds_text",
        "seeded_split", "shared_data_dir"),
    "glomo_tf.data.batching": (
        "bucketed_training_batches", "encode", "length_sorted_batches", "sequence_lengths"),
    "glomo_tf.data.length_batches": ("LengthBatches",),
    "glomo_tf.data.sentences": (
        "consecutive_sentences", "corrupt", "encode_columns", "read_documents", "with_mask_unit"),
    "glomo_tf.data.images": (
        "PlantedImages", "builtin_planted_images", "generate_planted_images", "key_readers",
        "load_cifar10", "load_digits_images"),
    "glomo_tf.data.graph_cache": (
        "GraphCache", "batch_of", "cached_inference_batches", "cached_training_batches",
        "compute_graphs", "with_graphs"),
    "glomo_tf.data.gold_graphs": (
        "dependency_parents", "edge_graphs", "gold_graph_cache", "listops_parents",
        "tree_graphs"),
    "glomo_tf.data.conllu": ("DependencySentence", "read_conllu"),
})
