"""Heatmaps of latent graphs, with the tokens on both axes (matplotlib, Agg backend).

Graphs follow the library's convention: row ``t`` is the *receiving* unit, column ``s`` the
*source*, ``G[t, s]`` the weight ``t`` puts on ``s``. The functions build figures with
``matplotlib.figure.Figure`` and never touch ``pyplot``'s global state, so they are safe in scripts,
servers, TensorBoard callbacks and notebooks alike (in a notebook, display the returned figure).

Example:

>>> import numpy as np
>>> from glomo_tf import viz
>>> graph = np.tril(np.ones((4, 4)), -1)
>>> graph /= np.maximum(graph.sum(-1, keepdims=True), 1)
>>> fig = viz.graph_figure(graph, ["the", "cat", "sat", "down"], marks=[(3, 1)])
>>> viz.figure_to_png(fig)[:8] == b"\\x89PNG\\r\\n\\x1a\\n"
True
"""

import io

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _tick_fontsize(length):
    return float(np.clip(260.0 / max(length, 1), 3.0, 9.0))


def plot_graph(ax, graph, tokens=None, title=None, marks=None, vmax=None, cmap="Blues",
               mark_color="red", colorbar=False):
    """Draws one ``[T, T]`` graph on a matplotlib ``Axes``.

    Args:
        ax: the ``Axes`` to draw on.
        graph: ``[T, T]`` array, rows = receiving units, columns = sources.
        tokens: optional sequence of ``T`` token strings, written on both axes.
        title: optional panel title.
        marks: optional iterable of ``(receiver, source)`` cells outlined in ``mark_color`` (e.g.
            the planted or expected edges).
        vmax: upper end of the color scale; defaults to the graph's maximum (at least 1e-6).
        cmap: matplotlib colormap name.
        mark_color: color of the outlines.
        colorbar: bool, add a colorbar next to the panel.

    Returns:
        The image artist.
    """
    graph = np.asarray(graph, dtype=np.float32)
    if graph.ndim != 2 or graph.shape[0] != graph.shape[1]:
        raise ValueError(f"plot_graph expects a square [T, T] graph, got shape {graph.shape}.")
    length = graph.shape[0]
    if tokens is not None and len(tokens) != length:
        raise ValueError(f"Got {len(tokens)} tokens for a graph over {length} units.")
    vmax = float(vmax if vmax is not None else max(float(graph.max(initial=0.0)), 1e-6))
    image = ax.imshow(graph, cmap=cmap, vmin=0.0, vmax=vmax, interpolation="nearest",
                      aspect="equal")
    if tokens is not None:
        size = _tick_fontsize(length)
        ax.set_xticks(range(length))
        ax.set_xticklabels(tokens, rotation=90, fontsize=size)
        ax.set_yticks(range(length))
        ax.set_yticklabels(tokens, fontsize=size)
    ax.set_xlabel("source s", fontsize=8)
    ax.set_ylabel("receiving unit t", fontsize=8)
    ax.tick_params(length=1.5, pad=1)
    for receiver, source in (marks if marks is not None else ()):
        ax.add_patch(Rectangle((source - 0.5, receiver - 0.5), 1.0, 1.0, fill=False,
                               edgecolor=mark_color, linewidth=1.2))
    if title:
        ax.set_title(title, fontsize=9)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.02)
    return image


def panels_figure(panels, columns=2, panel_size=5.0, suptitle=None, footnote=None):
    """A figure with one heatmap per panel.

    Args:
        panels: list of dicts with the keyword arguments of :func:`plot_graph` (``graph`` required;
            ``tokens``, ``title``, ``marks``, ``vmax``, ``colorbar``, ... optional).
        columns: int, panels per row.
        panel_size: float, inches per panel side.
        suptitle: optional figure title.
        footnote: optional text under the panels (a legend of the token names, say).

    Returns:
        A ``matplotlib.figure.Figure``.
    """
    if not panels:
        raise ValueError("panels_figure needs at least one panel.")
    columns = max(1, min(int(columns), len(panels)))
    rows = -(-len(panels) // columns)
    extra = (0.4 if suptitle else 0.0) + (0.3 * (footnote.count("\n") + 1) if footnote else 0.0)
    fig = Figure(figsize=(panel_size * columns, panel_size * rows + extra), layout="constrained")
    axes = np.asarray(fig.subplots(rows, columns, squeeze=False)).ravel()
    for ax, panel in zip(axes, panels):
        plot_graph(ax, **panel)
    for ax in axes[len(panels):]:
        ax.set_axis_off()
    if suptitle:
        fig.suptitle(suptitle, fontsize=11)
    if footnote:
        fig.supxlabel(footnote, fontsize=10)
    return fig


def graph_figure(graph, tokens=None, title=None, marks=None, panel_size=5.0):
    """A figure for a ``[T, T]`` graph, or a grid (layers x heads) for ``[L, K, T, T]`` graphs.

    Args:
        graph: ``[T, T]`` or ``[L, K, T, T]`` array (one direction of one sequence, e.g.
            ``outputs["graphs"][b, 0]`` from :class:`glomo_tf.GlomoPretrainer`).
        tokens: optional ``T`` token strings for both axes.
        title: optional figure title.
        marks: optional ``(receiver, source)`` cells to outline in every panel.
        panel_size: float, inches per panel side.
    """
    graph = np.asarray(graph)
    if graph.ndim == 2:
        return panels_figure([dict(graph=graph, tokens=tokens, title=title, marks=marks)],
                             columns=1, panel_size=panel_size)
    if graph.ndim != 4:
        raise ValueError(f"graph_figure expects [T, T] or [L, K, T, T], got shape {graph.shape}.")
    layers, heads = graph.shape[:2]
    panels = [dict(graph=graph[l, k], tokens=tokens, title=f"layer {l + 1}, head {k + 1}",
                   marks=marks)
              for l in range(layers) for k in range(heads)]
    return panels_figure(panels, columns=heads, panel_size=panel_size, suptitle=title)


def figure_to_png(fig, path=None, dpi=110):
    """Renders ``fig`` as PNG bytes (Agg); also writes them to ``path`` when given."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    data = buffer.getvalue()
    if path is not None:
        with open(path, "wb") as handle:
            handle.write(data)
    return data


def graph_image(graph, tokens=None, title=None, marks=None, panel_size=4.0, dpi=100):
    """A ``[T, T]`` graph drawn as an image: ``uint8`` ``[H, W, 4]`` (RGBA), e.g. for
    ``tf.summary.image`` (the TensorBoard graph images of ``glomo pretrain``).

    Args:
        graph: ``[T, T]`` array, rows = receiving units, columns = sources.
        tokens: optional ``T`` token strings for both axes.
        title: optional panel title.
        marks: optional ``(receiver, source)`` cells to outline.
        panel_size: float, inches per side; with ``dpi``, the image size.
        dpi: int, pixels per inch.
    """
    from matplotlib.image import imread
    graph = np.asarray(graph)
    if graph.ndim != 2:
        raise ValueError(f"graph_image expects a [T, T] graph, got shape {graph.shape}.")
    fig = panels_figure([dict(graph=graph, tokens=tokens, title=title, marks=marks)],
                        columns=1, panel_size=panel_size)
    pixels = imread(io.BytesIO(figure_to_png(fig, dpi=dpi)), format="png")  # float in [0, 1]
    return np.round(pixels * 255.0).astype(np.uint8)
