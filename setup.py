"""glomo_tf: GLoMo latent relational graphs for Keras 3 on TensorFlow."""

from setuptools import find_packages, setup

# TensorFlow, tensorflow-text and Keras must agree: these versions are verified together.
CORE = [
    "tensorflow==2.21.0",
    "tensorflow-text==2.21.1",
    "keras>=3.15,<3.16",
    "tensorboard>=2.20",  # TensorFlow 2.21 no longer pulls it in
    "numpy>=1.26",
    "matplotlib>=3.8",
    "scipy>=1.10",  # glomo_tf.evaluation: the paired t-test's p-value (scipy.stats.t)
]
EXTRAS = {
    # scikit-learn: the tests of `glomo probe` and of the digits image set need it;
    # pytest-xdist: the suite on two processes (`pytest -n 2 --dist loadfile`, the README's).
    "test": ["pytest>=8", "pytest-xdist>=3.6,<4", "nbclient>=0.10", "nbformat>=5.10",
             "ipykernel>=6.29", "pyyaml>=6", "scikit-learn>=1.5,<2"],
    "tune": ["keras-tuner==1.4.8"],
    # aiohttp: the REST server's HTTP/1.1 and the client's (its C parser, llhttp); orjson: the
    # REST server writes numeric tensors in C, not per element; pysimdjson: the client reads
    # them from an answer straight into arrays, without a Python number per element;
    # prometheus-client: the server's metrics and their text format.
    "serve": ["tensorflow-serving-api==2.21.0", "aiohttp>=3.10,<4", "orjson>=3.10,<4",
              "pysimdjson>=7,<8", "prometheus-client>=0.20,<1"],
    "datasets": ["tensorflow-datasets==4.9.10"],
    # Presets named by a Hub handle (glomo_tf.presets.download): hf://OWNER/NAME through
    # huggingface_hub, kaggle://OWNER/MODEL/FRAMEWORK/VARIATION through kagglehub.
    "hub": ["huggingface-hub>=0.23,<3", "kagglehub>=0.3,<2"],
    # SentEval-style probes (logistic regression) and scikit-learn's built-in digits images.
    "sklearn": ["scikit-learn>=1.5,<2"],
    # The API reference (mkdocs.yml, docs/api/): `mkdocs build --strict`, run by tests/docs/test_docs.py.
    "docs": ["mkdocs>=1.6,<2", "mkdocstrings[python]>=1.0,<2", "mkdocstrings-python>=2.0,<3"],
}
EXTRAS["all"] = sorted({req for reqs in EXTRAS.values() for req in reqs})

setup(
    name="glomo_tf",
    version="0.1.0",
    description="GLoMo: unsupervisedly learned relational graphs as transferable Keras layers",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10,<3.14",
    packages=find_packages(include=["glomo_tf", "glomo_tf.*"]),
    # The built-in presets (glomo_tf.list_presets()): weights, configs, tokenizers, model cards.
    package_data={"glomo_tf": ["builtin_presets/*/*.*", "builtin_presets/*/assets/tokenizer/*"]},
    install_requires=CORE,
    extras_require=EXTRAS,
    entry_points={"console_scripts": ["glomo=glomo_tf.cli:main"]},
    license="Apache-2.0",
)
