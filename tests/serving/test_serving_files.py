"""serving/: TensorFlow Serving deployment files parse and agree on names, paths and ports.

``models.config`` is parsed with TensorFlow Serving's own ``ModelServerConfig`` message
(tensorflow-serving-api). The pip package does not ship the ``BatchingParameters`` and
``MonitoringConfig`` messages, so they are declared here with the fields, numbers and types of
tensorflow_serving/servables/tensorflow/session_bundle_config.proto and
tensorflow_serving/config/monitoring_config.proto; protobuf's text parser rejects any unknown field
or wrong type, as the model server does.
"""

import json
import os
import re

import pytest
import yaml
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format
from google.protobuf import wrappers_pb2
from tensorflow_serving.config import model_server_config_pb2

from glomo_tf.export.saved_model import SIGNATURES
from _paths import REPO

SERVING = os.path.join(REPO, "serving")
GRPC_PORT, REST_PORT = 8500, 8501


def _read(name):
    with open(os.path.join(SERVING, name), encoding="utf-8") as f:
        return f.read()


def _serving_messages():
    """BatchingParameters, PrometheusConfig and MonitoringConfig message classes."""
    pool = descriptor_pool.DescriptorPool()
    pool.Add(descriptor_pb2.FileDescriptorProto.FromString(wrappers_pb2.DESCRIPTOR.serialized_pb))
    f = descriptor_pb2.FileDescriptorProto(
        name="tf_serving_subset.proto", package="tensorflow.serving", syntax="proto3",
        dependency=["google/protobuf/wrappers.proto"])
    F = descriptor_pb2.FieldDescriptorProto
    batching = f.message_type.add(name="BatchingParameters")
    for number, name, wrapper in [(1, "max_batch_size", "Int64Value"),
                                  (2, "batch_timeout_micros", "Int64Value"),
                                  (3, "max_enqueued_batches", "Int64Value"),
                                  (4, "num_batch_threads", "Int64Value"),
                                  (5, "thread_pool_name", "StringValue")]:
        batching.field.add(name=name, number=number, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                           type_name=f".google.protobuf.{wrapper}")
    batching.field.add(name="allowed_batch_sizes", number=6, type=F.TYPE_INT64,
                       label=F.LABEL_REPEATED)
    batching.field.add(name="pad_variable_length_inputs", number=7, type=F.TYPE_BOOL,
                       label=F.LABEL_OPTIONAL)
    prometheus = f.message_type.add(name="PrometheusConfig")
    prometheus.field.add(name="enable", number=1, type=F.TYPE_BOOL, label=F.LABEL_OPTIONAL)
    prometheus.field.add(name="path", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    monitoring = f.message_type.add(name="MonitoringConfig")
    monitoring.field.add(name="prometheus_config", number=1, type=F.TYPE_MESSAGE,
                         label=F.LABEL_OPTIONAL, type_name=".tensorflow.serving.PrometheusConfig")
    pool.Add(f)
    return {name: message_factory.GetMessageClass(
        pool.FindMessageTypeByName(f"tensorflow.serving.{name}"))
        for name in ("BatchingParameters", "MonitoringConfig")}


MESSAGES = _serving_messages()


@pytest.fixture(scope="module")
def models_config():
    return text_format.Parse(_read("models.config"), model_server_config_pb2.ModelServerConfig())


@pytest.fixture(scope="module")
def compose():
    return yaml.safe_load(_read("docker-compose.yml"))


@pytest.fixture(scope="module")
def flags(compose):
    """The tensorflow_model_server flags of the compose file, ``{name: value}``."""
    command = compose["services"]["tfserving"]["command"]
    parsed = {}
    for item in command:
        match = re.fullmatch(r"--([a-z_]+)=(.+)", item)
        assert match, f"unexpected model server argument {item!r}"
        parsed[match.group(1)] = match.group(2)
    return parsed


def _volumes(service):
    """``{container path: host path relative to serving/}`` of a compose service."""
    mounts = {}
    for volume in service["volumes"]:
        host, container, *mode = volume.split(":")
        assert mode == ["ro"], f"{volume}: mount read-only"
        mounts[container] = os.path.normpath(host)
    return mounts


def _host_path(mounts, container_path):
    """The host file (relative to serving/) behind a container path, through the mounts."""
    for container, host in sorted(mounts.items(), key=lambda kv: -len(kv[0])):
        if container_path == container or container_path.startswith(container.rstrip("/") + "/"):
            return os.path.normpath(os.path.join(host, os.path.relpath(container_path, container)))
    raise AssertionError(f"{container_path} is not inside any mounted volume: {mounts}")


# ---------------------------------------------------------------------------------- syntax
def test_models_config(models_config):
    (config,) = models_config.model_config_list.config
    assert config.name == "glomo"
    assert config.base_path == "/models/glomo"
    assert config.model_platform == "tensorflow"
    assert config.model_version_policy.latest.num_versions == 1


def test_batching_config():
    params = text_format.Parse(_read("batching.config"), MESSAGES["BatchingParameters"]())
    assert params.max_batch_size.value >= 1 and params.num_batch_threads.value >= 1
    assert 0 < params.batch_timeout_micros.value <= 100_000
    assert params.max_enqueued_batches.value >= 1
    sizes = list(params.allowed_batch_sizes)
    assert not sizes or (sizes == sorted(sizes) and sizes[-1] == params.max_batch_size.value)
    # TF Serving pads with each tensor's first value, which would corrupt token-id padding (0).
    assert params.pad_variable_length_inputs is False


def test_unknown_fields_are_rejected():
    # The parsers are strict, so the syntax tests above can fail.
    with pytest.raises(text_format.ParseError, match="max_batch"):
        text_format.Parse("max_batch { value: 3 }", MESSAGES["BatchingParameters"]())
    with pytest.raises(text_format.ParseError):
        text_format.Parse("prometheus_config { enable: maybe }", MESSAGES["MonitoringConfig"]())
    with pytest.raises(text_format.ParseError):
        text_format.Parse("model_config_list { config { nam: 'x' } }",
                          model_server_config_pb2.ModelServerConfig())


def test_monitoring_config():
    config = text_format.Parse(_read("monitoring.config"), MESSAGES["MonitoringConfig"]())
    assert config.prometheus_config.enable is True
    assert config.prometheus_config.path == "/monitoring/prometheus/metrics"


# ---------------------------------------------------------------------------------- consistency
def test_compose_runs_the_model_server_with_the_config_files(compose, flags, models_config):
    service = compose["services"]["tfserving"]
    image, tag = service["image"].split(":-")[-1].rstrip("}").split(":")
    assert image == "tensorflow/serving"
    with open(os.path.join(REPO, "setup.py"), encoding="utf-8") as f:
        serving_api = re.search(r'"tensorflow-serving-api==([\d.]+)"', f.read()).group(1)
    assert tag == serving_api  # the server and the client protos of one release
    assert service["entrypoint"] == ["tensorflow_model_server"]
    assert flags["port"] == str(GRPC_PORT) and flags["rest_api_port"] == str(REST_PORT)
    assert sorted(service["ports"]) == [f"{GRPC_PORT}:{GRPC_PORT}", f"{REST_PORT}:{REST_PORT}"]
    assert flags["enable_batching"] == "true"
    mounts = _volumes(service)
    # Every config flag points, through a volume, at the file of that name in serving/.
    for flag, name in [("model_config_file", "models.config"),
                       ("batching_parameters_file", "batching.config"),
                       ("monitoring_config_file", "monitoring.config")]:
        assert _host_path(mounts, flags[flag]) == name
        assert os.path.isfile(os.path.join(SERVING, name))
    # The model's base path lies in the mounted model repository, serving/models.
    (config,) = models_config.model_config_list.config
    assert _host_path(mounts, config.base_path) == os.path.join("models", config.name)
    assert os.path.isdir(os.path.join(SERVING, "models"))
    assert int(flags["file_system_poll_wait_seconds"]) > 0


def test_prometheus_scrapes_the_model_server(compose, flags):
    prometheus = compose["services"]["prometheus"]
    config_file = re.search(r"--config\.file=(\S+)", " ".join(prometheus["command"])).group(1)
    assert _host_path(_volumes(prometheus), config_file) == "prometheus.yml"
    assert "tfserving" in prometheus["depends_on"]
    scrape = yaml.safe_load(_read("prometheus.yml"))
    (job,) = scrape["scrape_configs"]
    monitoring = text_format.Parse(_read("monitoring.config"), MESSAGES["MonitoringConfig"]())
    assert job["metrics_path"] == monitoring.prometheus_config.path
    (target,) = job["static_configs"][0]["targets"]
    host, port = target.split(":")
    assert host in compose["services"] and compose["services"][host] is compose["services"][
        "tfserving"]
    assert port == flags["rest_api_port"]  # metrics are served on the REST port


def test_readme_matches_the_configs_and_signatures(models_config, compose):
    readme = _read("README.md")
    (config,) = models_config.model_config_list.config
    # The export command writes where the server reads: serving/models/<name>.
    match = re.search(r"glomo export .*?--export-dir (\S+) --model-name (\S+)", readme, re.S)
    export_dir, model_name = match.groups()
    assert model_name == config.name
    mounts = _volumes(compose["services"]["tfserving"])
    assert os.path.join("serving", _host_path(mounts, config.base_path)) == os.path.join(
        export_dir, model_name)
    # Every URL names the model and a port of the compose file.
    urls = re.findall(r"http://localhost:(\d+)(/\S*)?", readme)
    assert urls
    for port, path in urls:
        assert int(port) in (REST_PORT, 9090)
        if path.startswith("/v1/models/"):
            assert re.match(rf"/v1/models/{config.name}(/versions/\d+)?(:predict|/metadata)?$",
                            path.rstrip("`")), path
    assert f'"localhost:{GRPC_PORT}"' in readme
    # The signature table lists exactly the export's signatures, inputs and outputs.
    rows = re.findall(r"^\| `(\w+)` \| `(\w+)` [^|]*\| (.*) \|$", readme, re.M)
    assert {name: (input_name, tuple(re.findall(r"`(\w+)`", outputs)))
            for name, input_name, outputs in rows} == SIGNATURES
    # Request bodies are JSON for existing signatures and inputs.
    for body in re.findall(r"-d '(.*)'", readme):
        body = json.loads(body)
        name = body.get("signature_name", "serving_default")
        assert name in SIGNATURES
        if "inputs" in body:
            assert list(body["inputs"]) == [SIGNATURES[name][0]]
        else:
            assert isinstance(body["instances"], list) and body["instances"]
    for name in re.findall(r'signature_name = "(\w+)"', readme):
        assert name in SIGNATURES
    for block in re.findall(r"```python\n(.*?)```", readme, re.S):
        compile(block, "README.md", "exec")
