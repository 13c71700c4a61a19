"""Where presets come from beyond a local directory or a built-in name: ``hf://`` and
``kaggle://`` handles, downloaded by ``huggingface_hub`` / ``kagglehub`` (the ``hub`` extra,
``pip install 'glomo_tf[hub]'``; imported only for a handle), and the errors a preset that
cannot be found or read raises (:mod:`glomo_tf.presets` hands them on).
"""

import importlib
import json
import os


class PresetError(ValueError):
    """A preset that cannot be found or read; the message names the file and the fix."""


class MissingHubLibrary(PresetError, ImportError):
    """An ``hf://`` or ``kaggle://`` handle without the library that downloads it: the message
    names the extra to install."""


# Handle scheme -> (the library that downloads it, the handle's form).
HUBS = {"hf": ("huggingface_hub", "hf://OWNER/NAME or hf://OWNER/NAME@REVISION"),
        "kaggle": ("kagglehub", "kaggle://OWNER/MODEL/FRAMEWORK/VARIATION[/VERSION]")}
# An upload names a repository (Hugging Face) or a variation, whose next version Kaggle numbers.
UPLOAD_FORMS = {"hf": "hf://OWNER/NAME", "kaggle": "kaggle://OWNER/MODEL/FRAMEWORK/VARIATION"}
HUB_EXTRA = "hub"


def download(handle, metadata_file="metadata.json"):
    """The local directory of the preset at ``handle``, downloaded (or found in the library's
    cache) by ``huggingface_hub.snapshot_download`` for ``hf://OWNER/NAME[@REVISION]`` or
    ``kagglehub.model_download`` for ``kaggle://OWNER/MODEL/FRAMEWORK/VARIATION[/VERSION]``;
    the library is imported here, and a missing one is a :class:`MissingHubLibrary` naming the
    ``hub`` extra."""
    kind, path = _parse(handle, "reads presets from", {"hf": (2,), "kaggle": (4, 5)})
    hub = _library(kind, f"loading the preset {handle!r}")
    if kind == "hf":
        repo_id, _, revision = path.partition("@")
        directory = hub.snapshot_download(repo_id=repo_id, revision=revision or None)
    else:
        directory = hub.model_download(path)
    directory = os.fspath(directory)
    if not os.path.isfile(os.path.join(directory, metadata_file)):
        raise PresetError(f"{handle!r} holds no glomo_tf preset (no {metadata_file} in "
                          f"{directory}): upload a directory written by save_to_preset.")
    return directory


def upload(handle, directory):
    """Uploads the preset ``directory`` to ``handle``: the Hugging Face repository
    ``hf://OWNER/NAME`` (created when it does not exist, ``huggingface_hub``) or the Kaggle model
    variation ``kaggle://OWNER/MODEL/FRAMEWORK/VARIATION`` (a new version of it,
    ``kagglehub.model_upload``). The handle is checked, and the library imported, before anything
    is sent. Returns ``handle``."""
    kind, path = _parse(handle, "uploads presets to", {"hf": (2,), "kaggle": (4,)},
                        upload=True)
    hub = _library(kind, f"uploading to {handle!r}")
    if kind == "hf":
        hub.create_repo(repo_id=path, exist_ok=True)
        hub.upload_folder(repo_id=path, folder_path=directory)
    else:
        hub.model_upload(path, directory)
    return handle


def _parse(handle, verb, lengths, upload=False):
    """``(scheme, path)`` of a hub handle, with one line naming its right form where it is
    wrong."""
    kind = scheme(handle)
    if kind not in HUBS:
        raise PresetError(f"{handle!r}: glomo_tf {verb} hf:// and kaggle:// handles, not "
                          f"{kind}://" + ("." if upload else "; or pass a local preset directory."))
    path = handle.split("://", 1)[1].strip("/")
    parts = path.split("/")
    form = UPLOAD_FORMS[kind] if upload else HUBS[kind][1]
    if len(parts) not in lengths[kind] or not all(parts) or (upload and "@" in path):
        use = "upload to" if upload else "read"
        raise PresetError(f"{handle!r} is not a {kind} handle to {use}: write it {form}.")
    return kind, path


def _library(kind, doing):
    library = HUBS[kind][0]
    try:
        return importlib.import_module(library)
    except ImportError:
        raise MissingHubLibrary(f"{doing} needs {library}: pip install "
                                f"'glomo_tf[{HUB_EXTRA}]'.") from None


def scheme(preset):
    """``"hf"`` for ``hf://...`` (any ``scheme://``), None for a path or a name."""
    head, separator, _ = preset.partition("://")
    return head.lower() if separator and head.isidentifier() else None


def existing_file(directory, name):
    """The path of the preset file ``name`` in ``directory``; a :class:`PresetError` when it is
    missing."""
    path = os.path.join(directory, name)
    if not os.path.isfile(path):
        raise PresetError(f"the preset {directory!r} is missing {name}: it is partial or "
                          "damaged; write it again (glomo_tf.save_preset).")
    return path


def read_json(directory, name):
    """The JSON file ``name`` of the preset in ``directory``, read; a :class:`PresetError` when it
    is missing or damaged."""
    path = existing_file(directory, name)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as error:
        raise PresetError(f"could not read {path} ({first_line(error)}): the preset is damaged; "
                          "write it again (glomo_tf.save_preset).") from None


def first_line(error):
    """The first line of an error's message, for a one-line error of our own."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
