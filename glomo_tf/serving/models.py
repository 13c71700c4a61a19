"""Model versions on disk -> loaded, callable servables, managed like TF Serving's ServerCore.

A model is a base directory holding one numeric sub-directory per version, each a SavedModel::

    BASE_PATH/1/saved_model.pb, variables/, assets/
    BASE_PATH/2/...

:class:`ModelManager` polls every base directory (``--file_system_poll_wait_seconds``), loads the
versions its version policy aspires to (``latest`` N, ``all``, ``specific``; default: the latest
one), and unloads the others once an aspired version is available, so requests never see a gap
during a hot swap. A version directory is considered only once it holds ``saved_model.pb`` (write
exports elsewhere and rename them into place to publish them atomically). A version that fails to
load is retried on later polls, up to ``max_num_load_retries`` times, or again once its
``saved_model.pb`` changes.
"""

import dataclasses
import functools
import json
import logging
import os
import re
import threading

import numpy as np

from glomo_tf.serving.errors import CODE_NAMES, ServingError, invalid, not_found

log = logging.getLogger("glomo_tf.serving")

DEFAULT_SIGNATURE = "serving_default"
PREDICT_METHOD = "tensorflow/serving/predict"
# ModelVersionStatus.State numbers (tensorflow_serving/apis/get_model_status.proto).
STATES = {"UNKNOWN": 0, "START": 10, "LOADING": 20, "AVAILABLE": 30, "UNLOADING": 40, "END": 50}


# ----------------------------------------------------------------------------- configuration

@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """One served model: TF Serving's ``ModelConfig`` (model_server_config.proto) in Python.

    Args:
        name: the model name in request paths.
        base_path: directory holding the numeric version directories.
        policy: ``"latest"``, ``"all"`` or ``"specific"``.
        num_versions: for ``latest``, how many of the newest versions to serve.
        versions: for ``specific``, the versions to serve.
        labels: version labels (``{"stable": 1}``) usable instead of a version number.
    """

    name: str
    base_path: str
    policy: str = "latest"
    num_versions: int = 1
    versions: tuple = ()
    labels: tuple = ()  # ((label, version), ...), hashable

    def aspired(self, available):
        """The versions among ``available`` (on disk) that this policy serves."""
        available = sorted(available)
        if self.policy == "all":
            return set(available)
        if self.policy == "specific":
            return set(self.versions) & set(available)
        return set(available[-self.num_versions:]) if available else set()


def model_configs_from_proto(config):
    """ModelServerConfig proto -> list of :class:`ModelConfig` (raises ValueError when unusable)."""
    if config.WhichOneof("config") == "custom_model_config":
        raise ValueError("custom_model_config is not supported; use model_config_list")
    configs = []
    for entry in config.model_config_list.config:
        if not entry.name:
            raise ValueError("a model config has no name")
        if not entry.base_path:
            raise ValueError(f"model {entry.name!r} has no base_path")
        if entry.model_platform not in ("", "tensorflow"):
            raise ValueError(f"model {entry.name!r}: model_platform {entry.model_platform!r} is "
                             "not supported (only 'tensorflow')")
        which = entry.model_version_policy.WhichOneof("policy_choice")
        policy = dict(name=entry.name, base_path=os.path.abspath(entry.base_path))
        if which == "all":
            policy["policy"] = "all"
        elif which == "specific":
            if not entry.model_version_policy.specific.versions:
                raise ValueError(f"model {entry.name!r}: specific version policy lists no "
                                 "versions")
            policy.update(policy="specific",
                          versions=tuple(entry.model_version_policy.specific.versions))
        elif which == "latest":
            num = entry.model_version_policy.latest.num_versions or 1
            policy.update(policy="latest", num_versions=num)
        policy["labels"] = tuple(sorted(entry.version_labels.items()))
        configs.append(ModelConfig(**policy))
    names = [c.name for c in configs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"model names appear more than once: {', '.join(duplicates)}")
    return configs


def parse_model_config_text(text):
    """A ``--model_config_file`` (ModelServerConfig in protobuf text format) -> ModelConfigs."""
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2
    config = model_server_config_pb2.ModelServerConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as error:
        raise ValueError(f"cannot parse the model config: {error}") from None
    return model_configs_from_proto(config)


# ----------------------------------------------------------------------------- signatures

def _shape_of(tensor_info):
    """Signature shape as a tuple with -1 for unknown dims, or None for unknown rank."""
    shape = tensor_info.tensor_shape
    if shape.unknown_rank:
        return None
    return tuple(int(d.size) for d in shape.dim)


def _format_shape(shape):
    return "[?]" if shape is None else "[" + ",".join(str(d) for d in shape) + "]"


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    dtype: str          # "DT_FLOAT"...
    shape: tuple        # None: unknown rank; -1: unknown dim
    enum: int = 0       # the DataType number

    @property
    def batch_major(self):
        return self.shape is not None and len(self.shape) >= 1 and self.shape[0] == -1


class Signature:
    """One callable signature of a loaded SavedModel.

    ``inputs``/``outputs`` map tensor aliases to :class:`TensorSpec`. ``mergeable`` says whether
    requests may be concatenated along dimension 0 and their results split back: every input and
    output is batch-major, and every output dimension after the first is static, so that no
    output's shape can depend on what else is in the batch (a padded ``[B, T]`` output with
    dynamic ``T`` is never merged).
    """

    def __init__(self, name, signature_def, function):
        from tensorflow.core.framework import types_pb2
        self.name = name
        self.signature_def = signature_def
        self.function = function
        self.inputs = {k: TensorSpec(types_pb2.DataType.Name(v.dtype), _shape_of(v), v.dtype)
                       for k, v in signature_def.inputs.items()}
        self.outputs = {k: TensorSpec(types_pb2.DataType.Name(v.dtype), _shape_of(v), v.dtype)
                        for k, v in signature_def.outputs.items()}
        self.mergeable = bool(self.inputs) and bool(self.outputs) and all(
            spec.batch_major for spec in self.inputs.values()) and all(
            spec.batch_major and all(d >= 0 for d in spec.shape[1:])
            for spec in self.outputs.values())
        self.text_prefix_bytes = None  # set by Servable for a text signature of a GLoMo export
        # Set by Servable for a GLoMo text signature: its outputs are padded to the longest text
        # of the batch (every dynamic dimension after the first is that length, the `lengths`
        # output gives each text's), so requests may be merged and cut back to their own length.
        self.pads_to_longest = False

    def cut_to_own_length(self, outputs):
        """The outputs of some rows of a merged batch, cut to the length those rows' own batch
        would have had: ``max(lengths)`` on every dynamic dimension after the first."""
        length = int(np.max(outputs["lengths"], initial=0))
        cut = {}
        for name, value in outputs.items():
            shape = self.outputs[name].shape
            index = tuple(slice(0, length) if i > 0 and size == -1 else slice(None)
                          for i, size in enumerate(shape))
            cut[name] = value[index]
        return cut

    def shorten_texts(self, inputs):
        """For a GLoMo export's text signature: ``(inputs with long texts cut, rows cut)``, or
        None when no text is long enough to cut.

        A text longer than :attr:`text_prefix_bytes` is cut at the last ASCII space, tab or
        newline within its first :attr:`text_prefix_bytes` bytes, so the tokenizer (whose units
        never span whitespace) gives the same first units for the cut text as for the whole. The
        cut is only safe when those units are more than the export's ``max_length`` (then both
        are truncated to the same units), which the caller checks on the ``truncated`` output:
        see :meth:`glomo_tf.serving.core.ServingCore.predict`.
        """
        if self.text_prefix_bytes is None:
            return None
        (alias, texts), = inputs.items()
        limit = self.text_prefix_bytes
        rows, shortened = [], None
        for row, text in enumerate(texts):
            if len(text) <= limit:
                continue
            head = text[:limit]
            cut = max(head.rfind(b" "), head.rfind(b"\t"), head.rfind(b"\n"))
            if cut <= 0:
                continue  # one word as long as the prefix: nothing safe to cut
            if shortened is None:
                shortened = texts.copy()
            shortened[row] = head[:cut]
            rows.append(row)
        return None if shortened is None else ({alias: shortened}, rows)

    def check_inputs(self, inputs):
        """Validate a ``{alias: ndarray}`` request against the signature (names, ranks, dims)."""
        sent, wanted = set(inputs), set(self.inputs)
        if sent != wanted:
            extra = ", ".join(sorted(sent - wanted))
            missing = ", ".join(sorted(wanted - sent))
            raise invalid(f"input size does not match signature {self.name!r}: {len(sent)}!="
                          f"{len(wanted)} len({{{', '.join(sorted(sent))}}}) != "
                          f"len({{{', '.join(sorted(wanted))}}}). Sent extra: {{{extra}}}. "
                          f"Missing but required: {{{missing}}}.")
        for alias, array in inputs.items():
            spec = self.inputs[alias]
            if spec.shape is not None:
                compatible = array.ndim == len(spec.shape) and all(
                    want < 0 or want == got for want, got in zip(spec.shape, array.shape))
                if not compatible:
                    raise invalid(f"input {alias!r} has shape {_format_shape(array.shape)} but "
                                  f"signature {self.name!r} expects {_format_shape(spec.shape)}")
            if spec.batch_major and array.shape[0] == 0:
                raise invalid(f"empty batch: input {alias!r} has no rows (dimension 0 is 0)")

    def run(self, inputs):
        """Call the signature on validated NumPy inputs; returns ``{alias: ndarray}``."""
        import tensorflow as tf
        try:
            tensors = {alias: tf.constant(value, dtype=tf.dtypes.as_dtype(self.inputs[alias].enum))
                       for alias, value in inputs.items()}
            results = self.function(**tensors)
        except tf.errors.OpError as error:
            raise ServingError(CODE_NAMES.get(error.error_code, "UNKNOWN"),
                               client_message(error.message)) from None
        except (TypeError, ValueError) as error:
            raise invalid(f"signature {self.name!r} rejected the inputs: {error}") from None
        return {alias: np.asarray(value.numpy()) for alias, value in results.items()}


def client_message(message):
    """A model's run-time error as a client should read it: an assertion's own text (``assertion
    failed: [token id] [57] [is out of range...]`` -> ``token id 57 is out of range...``) without
    TensorFlow's "Graph execution error" preamble and node names; other errors unchanged."""
    found = re.search(r"assertion failed: (.*)", message)
    if not found:
        return message
    parts = re.findall(r"\[([^\[\]]*)\]", found.group(1))
    return " ".join(part.strip() for part in parts if part.strip()) or message


@functools.cache
def register_serving_ops():
    """Register the tensorflow-text tokenizer kernels that TF Serving links in (once), so a
    SavedModel that loads there (a GLoMo export included) loads here, in a process that never
    imported ``tensorflow_text``. Without tensorflow-text installed, only core ops are there."""
    try:
        from glomo_tf.export.serving_ops import load_serving_ops
        load_serving_ops()
    except Exception as error:  # tensorflow-text missing or unusable: core ops only
        log.warning("tensorflow-text tokenizer ops not registered (%s); SavedModels using them "
                    "will fail to load", error)


class Servable:
    """One loaded model version: its SignatureDefs (all, for metadata) and callables."""

    def __init__(self, model_name, version, path, tags=("serve",)):
        import tensorflow as tf
        register_serving_ops()
        self.model_name = model_name
        self.version = version
        self.path = path
        self.signature_defs = read_signature_defs(path, tags)
        self._loaded = tf.saved_model.load(path, tags=list(tags))
        self.signatures = {}
        for name, function in self._loaded.signatures.items():
            if name in self.signature_defs:
                self.signatures[name] = Signature(name, self.signature_defs[name], function)
        max_length = glomo_export_max_length(path)
        if max_length is not None:
            for signature in self.signatures.values():
                if _cuttable_text_signature(signature):
                    # Units are at least a byte; 32 bytes a unit leaves room for long words.
                    signature.text_prefix_bytes = max(4096, 32 * (max_length + 1))
                    signature.pads_to_longest = _pads_to_longest(signature)

    def signature(self, name):
        name = name or DEFAULT_SIGNATURE
        if name not in self.signatures:
            raise invalid(f"Serving signature name: \"{name}\" not found in signature def "
                          f"(model {self.model_name!r} version {self.version} has: "
                          f"{', '.join(sorted(self.signatures)) or 'none'})")
        return self.signatures[name]


def glomo_export_max_length(path):
    """The ``max_length`` a GLoMo export records in ``assets/glomo_export.json``, or None."""
    try:
        with open(os.path.join(path, "assets", "glomo_export.json"), encoding="utf-8") as f:
            value = json.load(f).get("max_length")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and value > 0 else None


def _cuttable_text_signature(signature):
    """One ``[B]`` string input and a ``[B]`` bool ``truncated`` output: a GLoMo text
    signature, whose long texts :meth:`Signature.shorten_texts` may cut."""
    if len(signature.inputs) != 1:
        return False
    (spec,) = signature.inputs.values()
    truncated = signature.outputs.get("truncated")
    return (spec.dtype == "DT_STRING" and spec.shape == (-1,) and truncated is not None
            and truncated.dtype == "DT_BOOL" and truncated.shape == (-1,))


def _pads_to_longest(signature):
    """Batch-major outputs, among them ``lengths`` ``[B]``: a GLoMo text signature's layout."""
    lengths = signature.outputs.get("lengths")
    return (lengths is not None and lengths.shape == (-1,)
            and all(spec.batch_major for spec in signature.outputs.values()))


def read_signature_defs(path, tags=("serve",)):
    """``{name: SignatureDef}`` of the MetaGraph tagged ``tags`` in the SavedModel at ``path``."""
    from google.protobuf import text_format
    from tensorflow.core.protobuf import saved_model_pb2
    saved_model = saved_model_pb2.SavedModel()
    pb = os.path.join(path, "saved_model.pb")
    if os.path.exists(pb):
        with open(pb, "rb") as f:
            saved_model.ParseFromString(f.read())
    else:
        with open(os.path.join(path, "saved_model.pbtxt"), encoding="utf-8") as f:
            text_format.Parse(f.read(), saved_model)
    for meta_graph in saved_model.meta_graphs:
        if set(meta_graph.meta_info_def.tags) == set(tags):
            return dict(meta_graph.signature_def)
    found = [sorted(m.meta_info_def.tags) for m in saved_model.meta_graphs]
    raise ValueError(f"no MetaGraph tagged {sorted(tags)} in {path} (found {found})")


# ----------------------------------------------------------------------------- versions

def saved_model_file(path):
    for name in ("saved_model.pb", "saved_model.pbtxt"):
        if os.path.isfile(os.path.join(path, name)):
            return os.path.join(path, name)
    return None


def versions_on_disk(base_path):
    """``{version: directory}`` for the numeric sub-directories that hold a SavedModel."""
    found = {}
    try:
        entries = os.listdir(base_path)
    except OSError:
        return found
    for entry in entries:
        path = os.path.join(base_path, entry)
        if entry.isdigit() and os.path.isdir(path) and saved_model_file(path):
            found[int(entry)] = path
    return found


@dataclasses.dataclass
class VersionState:
    version: int
    state: str = "START"
    error_code: str = "OK"
    error_message: str = ""
    servable: Servable = None
    failures: int = 0
    failed_stamp: tuple = None  # (mtime, size) of saved_model.pb when it last failed


class ModelManager:
    """Loads, serves and unloads model versions; the polling thread picks up new versions.

    Args:
        configs: the :class:`ModelConfig` list to serve.
        tags: MetaGraph tags to load (``--saved_model_tags``).
        poll_seconds: seconds between scans of the base paths; 0 or less disables the thread
            (call :meth:`poll` yourself).
        max_load_retries: attempts beyond the first for a version that fails to load.
    """

    def __init__(self, configs, tags=("serve",), poll_seconds=1.0, max_load_retries=5):
        self.tags = tuple(tags)
        self.poll_seconds = poll_seconds
        self.max_load_retries = max_load_retries
        self._configs = {}
        self._versions = {}          # model name -> {version: VersionState}
        self._lock = threading.Lock()         # guards _configs and _versions
        self._poll_lock = threading.Lock()    # one scan at a time
        self._stop = threading.Event()
        self._thread = None
        self.set_configs(configs)

    # -- configuration
    def set_configs(self, configs):
        """Serve exactly ``configs`` from the next poll on (models not listed are unloaded)."""
        with self._lock:
            self._configs = {c.name: c for c in configs}
            for name in self._configs:
                self._versions.setdefault(name, {})

    # -- polling
    def start(self):
        if self.poll_seconds and self.poll_seconds > 0 and self._thread is None:
            self._thread = threading.Thread(target=self._poll_loop, name="glomo-serve-poll",
                                            daemon=True)
            self._thread.start()

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def _poll_loop(self):
        while not self._stop.wait(self.poll_seconds):
            try:
                self.poll()
            except Exception:  # keep serving whatever is loaded
                log.exception("polling the model base paths failed")

    def poll(self):
        """Scan every base path once: load aspired versions, then unload the ones replaced."""
        with self._poll_lock:
            with self._lock:
                configs = dict(self._configs)
                removed = [name for name in self._versions if name not in configs]
            for name in removed:
                self._unload_model(name)
            for config in configs.values():
                self._poll_model(config)

    def _poll_model(self, config):
        on_disk = versions_on_disk(config.base_path)
        aspired = config.aspired(on_disk)
        if not on_disk:
            log.debug("no versions of servable %s found under base path %s", config.name,
                      config.base_path)
        with self._lock:
            states = self._versions.setdefault(config.name, {})
        for version in sorted(aspired, reverse=True):
            state = states.get(version)
            if state is not None and state.state == "AVAILABLE":
                continue
            stamp = _stamp(on_disk[version])
            if state is not None and state.failures:
                if state.failed_stamp == stamp and state.failures > self.max_load_retries:
                    continue
                if state.failed_stamp != stamp:
                    state.failures = 0
            self._load(config.name, version, on_disk[version], states, stamp)
        any_available = any(states[v].state == "AVAILABLE" for v in aspired if v in states)
        if any_available or not aspired:
            for version, state in list(states.items()):
                if version not in aspired and state.state == "AVAILABLE":
                    self._unload(config.name, state)

    def _load(self, name, version, path, states, stamp):
        with self._lock:
            state = states.setdefault(version, VersionState(version))
            state.state = "LOADING"
        log.info("Loading servable: {name: %s version: %d} from %s", name, version, path)
        try:
            servable = Servable(name, version, path, self.tags)
        except Exception as error:  # a broken export must not take the server down
            with self._lock:
                state.state = "END"
                state.error_code = "UNKNOWN"
                state.error_message = f"failed to load {path}: {type(error).__name__}: {error}"
                state.failures += 1
                state.failed_stamp = stamp
            log.error("Loading servable {name: %s version: %d} failed: %s", name, version, error)
            return
        with self._lock:
            state.servable = servable
            state.state = "AVAILABLE"
            state.error_code, state.error_message = "OK", ""
        log.info("Successfully loaded servable version {name: %s version: %d}", name, version)

    def _unload(self, name, state):
        with self._lock:
            state.state = "UNLOADING"
            state.servable = None
            state.state = "END"
        log.info("Unloaded servable version {name: %s version: %d}", name, state.version)

    def _unload_model(self, name):
        with self._lock:
            states = self._versions.pop(name, {})
        for state in states.values():
            if state.state == "AVAILABLE":
                self._unload(name, state)

    # -- lookups
    def _config(self, name):
        config = self._configs.get(name)
        if config is None:
            raise not_found(f"Servable not found for request: Latest({name}): no model named "
                            f"{name!r} (serving: {', '.join(sorted(self._configs)) or 'none'})")
        return config

    def _request(self, name, version, label):
        """Under the lock: a model's config, its version states, and the version asked for."""
        config = self._config(name)
        return config, self._versions.get(name, {}), _requested_version(name, config, version,
                                                                        label)

    def resolve(self, name, version=None, label=None):
        """The :class:`Servable` a request names: a version, a label, or else the latest one."""
        with self._lock:
            config, states, version = self._request(name, version, label)
            if version is not None:
                state = states.get(version)
                if state is None or state.state != "AVAILABLE":
                    available = sorted(v for v, s in states.items() if s.state == "AVAILABLE")
                    raise not_found(f"Servable not found for request: Specific({name}, {version})"
                                    f" (available versions: {available or 'none'})")
                return state.servable
            available = [s for s in states.values() if s.state == "AVAILABLE"]
            if not available:
                raise not_found(f"Servable not found for request: Latest({name}): no version of "
                                f"model {name!r} is loaded yet (base path {config.base_path})")
            return max(available, key=lambda s: s.version).servable

    def status(self, name, version=None, label=None):
        """``[VersionState]`` newest first; a version or label narrows it to that version."""
        with self._lock:
            _, states, version = self._request(name, version, label)
            if version is not None:
                if version not in states:
                    raise not_found(f"Could not find version {version} of model {name}")
                return [dataclasses.replace(states[version])]
            if not states:
                raise not_found(f"Could not find any versions of model {name}")
            return [dataclasses.replace(states[v]) for v in sorted(states, reverse=True)]


def _requested_version(name, config, version, label):
    """The version a request names, by number or by label (None: the latest)."""
    if version is not None and label is not None:
        raise invalid(f"Both model version ({version}) and model version label ({label}) "
                      "cannot be supplied.")
    if label is None:
        return version
    labels = dict(config.labels)
    if label not in labels:
        raise invalid(f"Unrecognized servable version label: {label} (model {name!r} "
                      f"has: {', '.join(sorted(labels)) or 'no labels'})")
    return labels[label]


def _stamp(path):
    pb = saved_model_file(path)
    try:
        info = os.stat(pb)
        return (info.st_mtime_ns, info.st_size)
    except (OSError, TypeError):
        return None
