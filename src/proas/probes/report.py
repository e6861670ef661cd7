"""Tables (CSV + Markdown) and PNG plots of the probes, written atomically."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from proas.experiments.datafiles import csv_text
from proas.fileio import atomic_write_bytes, atomic_write_text

__all__ = ["bar_plot", "line_plot", "write_table"]


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4f}"
    return "" if v is None else str(v)


def write_table(rows: Sequence[dict[str, Any]], stem: Path, columns: Sequence[str] | None = None) -> None:
    """``stem.csv`` and ``stem.md`` with ``columns`` (default: the first row's keys)."""
    cols = list(columns or (rows[0].keys() if rows else []))
    atomic_write_text(stem.with_suffix(".csv"), csv_text(cols, [[_fmt(r.get(c)) for c in cols] for r in rows]))
    md = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    md += ["| " + " | ".join(_fmt(r.get(c)).replace("|", "\\|") for c in cols) + " |" for r in rows]
    atomic_write_text(stem.with_suffix(".md"), "\n".join(md) + "\n")


def _save(fig, path: Path) -> None:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def bar_plot(path: Path, labels: Sequence[str], series: dict[str, Sequence[float]], *, ylabel: str, title: str,
             errors: dict[str, Sequence[float]] | None = None, xlabel: str = "") -> None:
    """Grouped bars, one group per label, one bar per series; values in [0, 1] shown as %."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(4.5, 1.4 * len(labels) + 2), 3.6), dpi=110)
    width = 0.8 / max(1, len(series))
    colors = ["tab:blue", "tab:red", "tab:green", "tab:orange"]
    for k, (name, vals) in enumerate(series.items()):
        xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(labels))]
        err = [100 * e for e in errors[name]] if errors and name in errors else None
        bars = ax.bar(xs, [100 * v for v in vals], width, yerr=err, capsize=3, label=name,
                      color=colors[k % len(colors)], alpha=0.85)
        for j, (b, v) in enumerate(zip(bars, vals)):
            top = b.get_height() + (err[j] if err else 0.0)  # above the error bar
            ax.annotate(f"{100 * v:.0f}%", (b.get_x() + b.get_width() / 2, top), ha="center",
                        va="bottom", fontsize=8, xytext=(0, 2), textcoords="offset points")
    ax.set_xticks(range(len(labels)), labels)
    ax.set_ylabel(ylabel)
    ax.set_xlabel(xlabel)
    ax.set_ylim(0, 105)
    ax.set_title(title, fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    if len(series) > 1:
        ax.legend(fontsize=8)
    _save(fig, path)


def line_plot(path: Path, series: dict[str, tuple[Sequence[float], Sequence[float]]], *, xlabel: str, ylabel: str,
              title: str) -> None:
    """Lines ``name -> (xs, ys)``, ys in [0, 1] shown as %."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for name, (xs, ys) in series.items():
        ax.plot(list(xs), [100 * y for y in ys], "o-", ms=3, lw=1.5, label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_ylim(-2, 102)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, path)
