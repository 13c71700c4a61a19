"""A griffe extension for the API reference: the type column from the docstrings' own words.

The docstrings give an argument's type in words at the start of its description, as Keras' do
(``num_mixtures: int, mixtures per direction.``, ``fine_tune: bool. False (default) freezes
...``), which reads well in ``help()`` but leaves the reference's type column empty. Before a
docstring is parsed, :class:`TypesFromWords` rewrites such an entry of an ``Args:`` section into
Google style, ``num_mixtures (int): mixtures per direction.``; a leading ``(default X)`` goes too,
since the reference has a column for defaults. Entries that start otherwise are left as they are.
"""

import re

import griffe

TYPES = ("int", "float", "bool", "str", "string", "list", "tuple", "dict", "callable")
SECTION = re.compile(r"^(\s*)(Args|Arguments|Parameters|Call arguments):\s*$")
ENTRY = re.compile(
    r"^(?P<indent>\s+)(?P<name>\*{0,2}\w+): (?P<type>" + "|".join(TYPES) + r")"
    r"(?:(?P<list> or None)?)(?:[,.;:]\s*|\s+(?=\()|$)(?P<rest>.*)$")
DEFAULT = re.compile(r"^\(default[^)]*\)\s*[:,.;]?\s*")
# Entries whose words name a type without a type word first: the type is added, the words kept.
NAMED = [
    (re.compile(r'^``"'), "str"),  # ``"learned"`` or ``"uniform"``
    (re.compile(r"^None \(default[^)]*\) or (?:an? )?(int|float|str)\b"), r"\1 | None"),
    (re.compile(r"^an? :class:`~?(?:[\w.]*\.)?(\w+)`"), r"\1"),  # a :class:`GraphPredictor`
]
NAMED_ENTRY = re.compile(r"^(?P<indent>\s+)(?P<name>\*{0,2}\w+): (?P<rest>.*)$")


def typed(docstring):
    """``docstring`` with each ``name: TYPE, description`` entry of its argument sections as
    ``name (TYPE): description``."""
    out, section, entry_indent = [], None, None
    for line in docstring.splitlines():
        header = SECTION.match(line)
        if header:
            section, entry_indent = header.group(1), None
            out.append(line)
            continue
        if section is not None and line.strip() and len(line) - len(line.lstrip()) <= len(section):
            section = None  # the section ended: text at its header's indentation
        if section is not None and entry_indent is None and line.strip():
            entry_indent = line[:len(line) - len(line.lstrip())]  # the section's first entry
        match = ENTRY.match(line) if section is not None else None
        if match and match["indent"] == entry_indent:
            kind = match["type"] + (" | None" if match["list"] else "")
            rest = DEFAULT.sub("", match["rest"])
            line = f"{match['indent']}{match['name']} ({kind}): {rest}"
        elif section is not None:
            line = _named(line, entry_indent)
        out.append(line)
    return "\n".join(out)


def _named(line, entry_indent):
    """An entry whose words start with a type's name (:data:`NAMED`), with that type."""
    match = NAMED_ENTRY.match(line)
    if not match or match["indent"] != entry_indent:
        return line
    for pattern, kind in NAMED:
        found = pattern.match(match["rest"])
        if found:
            return f"{match['indent']}{match['name']} ({found.expand(kind)}): {match['rest']}"
    return line


class TypesFromWords(griffe.Extension):
    """Rewrites the docstrings of every object before mkdocstrings parses them."""

    def on_instance(self, *, obj, **kwargs):
        if obj.docstring is not None:
            obj.docstring.value = typed(obj.docstring.value)
