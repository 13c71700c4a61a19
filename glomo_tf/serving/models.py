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
import logging
import os
import threading

from glomo_tf.serving.errors import invalid, not_found
# client_message and register_serving_ops are handed on for their callers (tests, benchmarks).
from glomo_tf.serving.servables import Servable, client_message, register_serving_ops  # noqa: F401

log = logging.getLogger("glomo_tf.serving")

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

    def may_load(self, stamp, max_retries):
        """Whether to try loading again: a version whose ``saved_model.pb`` changed since it
        last failed starts its retries afresh; one unchanged has ``max_retries`` of them."""
        if self.failures and self.failed_stamp != stamp:
            self.failures = 0
        return not self.failures or self.failures <= max_retries


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
            if state is None or state.may_load(stamp, self.max_load_retries):
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
