"""The HTML renderer: one self-contained page (inline CSS, pictures as base64 PNG, no script, no network).

The page forbids itself any fetch with a Content-Security-Policy (only inline styles and `data:` images
are allowed), so a report attached to a bug report shows the same offline, years later, and a stray
external reference fails loudly (a console error the Chromium test looks for) instead of leaking a
request. Cells are formatted by `cells.fmt_cell`, exactly as in the terminal tables.
"""

from __future__ import annotations

import base64
import html
import re

import pandas as pd

from forensics.colors import VERDICT_COLORS
from forensics.render import Report, Section
from forensics.render.cells import fmt_cell

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
STYLE = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif; color: #1b1b1b;
       max-width: 1180px; margin: 0 auto; padding: 16px 24px 48px; background: #fff; }
h1 { font-size: 1.6em; margin: 0.4em 0 0.2em; }
h2 { font-size: 1.25em; margin: 1.6em 0 0.4em; padding-bottom: 0.2em; border-bottom: 2px solid #dde3ea; }
h3 { font-size: 1.05em; margin: 1.2em 0 0.3em; }
p, li { max-width: 70em; }
nav ul { columns: 2; padding-left: 1.2em; }
table { border-collapse: collapse; margin: 0.4em 0 0.8em; font-size: 0.9em; }
th, td { border: 1px solid #d5dbe1; padding: 3px 8px; vertical-align: top; text-align: left; }
th { background: #eef2f6; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.mono, tr.detail td, code { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 0.92em; }
td.mono { white-space: pre; }  /* a sparkline's characters are time positions: no space may collapse */
tr.detail td { color: #3d4852; background: #fafbfc; border-top: none; }
tbody tr:nth-child(even of :not(.detail)) { background: #fbfcfd; }
figure { margin: 0.6em 0 1em; }
figure img { max-width: 100%; height: auto; border: 1px solid #e3e7eb; }
figcaption { font-size: 0.9em; color: #4a5560; }
.note { color: #4a5560; font-size: 0.92em; }
.empty { color: #6a7680; font-style: italic; }
footer { margin-top: 3em; color: #6a7680; font-size: 0.85em; }
"""
# Verdicts written in their colour (the plots' and the Perfetto export's: forensics/colors.py).
STYLE += "".join(f".v-{verdict} {{ color: {color}; }}\n" for verdict, color in VERDICT_COLORS.items())
VERDICTS = tuple(VERDICT_COLORS)


def _inline(text: str) -> str:
    """Escaped text with `code` spans as <code> (headings and paragraphs use the README's backticks)."""
    parts = html.escape(text).split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick stays as it is
        return html.escape(text)
    return "".join(f"<code>{part}</code>" if i % 2 else part for i, part in enumerate(parts))


def _anchor(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "section"


def _numeric(frame: pd.DataFrame, column: str) -> bool:
    dtype = frame[column].dtype
    return pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype)


def _cell(column: str, value: object, origin_ns: int | None) -> str:
    text = html.escape(fmt_cell(column, value, origin_ns))
    if column == "verdict" and isinstance(value, str) and value in VERDICTS:
        return f'<strong class="v-{value}">{text}</strong>'
    return text


def _table(section: Section, origin_ns: int | None) -> list[str]:
    frame = section.frame
    if frame is None or frame.empty:
        return [f'<p class="empty">{html.escape(section.empty)}</p>'] if section.empty else []
    columns = section.columns or {c: c for c in frame.columns if c != section.detail}
    names = [c for c in columns if c in frame.columns]
    numeric = {c: _numeric(frame, c) for c in names}
    out = ["<table>"]
    if any(columns[c] for c in names):  # a label/value table has no headings
        out.append("<thead><tr>" + "".join(f"<th>{html.escape(columns[c])}</th>" for c in names) + "</tr></thead>")
    out.append("<tbody>")
    details = frame[section.detail].tolist() if section.detail and section.detail in frame else None
    for i, row in enumerate(frame[names].itertuples(index=False, name=None)):
        cells = []
        for column, value in zip(names, row, strict=True):
            css = "num" if numeric[column] else ("mono" if column in ("timeline", "faults_over_time", "bar") else "")
            attr = f' class="{css}"' if css else ""
            cells.append(f"<td{attr}>{_cell(column, value, origin_ns)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
        if details is not None and isinstance(details[i], str) and details[i]:
            out.append(f'<tr class="detail"><td colspan="{len(names)}">{html.escape(details[i])}</td></tr>')
    out.append("</tbody></table>")
    return out


def _section(section: Section, origin_ns: int | None) -> list[str]:
    level = min(max(section.level, 2), 4)
    out = [f'<h{level} id="{_anchor(section.name)}">{_inline(section.title.strip())}</h{level}>']
    if section.text:
        out.extend(f"<p>{_inline(part)}</p>" for part in section.text.split("\n\n") if part.strip())
    if section.image is not None:
        data = base64.b64encode(section.image).decode("ascii")
        alt = html.escape(section.image_alt or section.title, quote=True)
        out.append(f'<figure><img alt="{alt}" src="data:image/png;base64,{data}">')
        if section.image_alt:
            out.append(f"<figcaption>{html.escape(section.image_alt)}</figcaption>")
        out.append("</figure>")
    out.extend(_table(section, origin_ns))
    if section.note:
        out.append(f'<p class="note">{_inline(section.note)}</p>')
    return out


def render_html(report: Report) -> str:
    title = html.escape(report.title.splitlines()[0] if report.title else "forensics report")
    body = [f"<h1>{html.escape(report.title)}</h1>"]
    chapters = [s for s in report.sections if s.level <= 2]
    nav = ""
    if len(chapters) > 3:
        links = "".join(f'<li><a href="#{_anchor(s.name)}">{_inline(s.title.strip())}</a></li>' for s in chapters)
        nav = f"<nav><ul>{links}</ul></nav>"
    for i, section in enumerate(report.sections):
        body.extend(_section(section, report.origin_ns))
        if i == 0 and nav:  # the answer first, then the contents of the rest
            body.append(nav)
    if report.notes:
        body.append("<footer>" + "".join(f"<p>{html.escape(n)}</p>" for n in report.notes) + "</footer>")
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{title}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n" + "\n".join(body) + "\n</body></html>\n"
    )
