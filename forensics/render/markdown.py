"""The Markdown renderer: headings, pipe tables and pictures as `data:` URIs, in one file.

Cells are formatted by `cells.fmt_cell` (as in the terminal tables); `|` inside a cell is escaped and a
section's `detail` (evidence) becomes an indented line under the table row's number, since pipe tables
cannot span a row. Pictures are embedded as base64 PNG so the file stands alone (some hosting sites
strip `data:` images when they show Markdown; the html report has the same content).
"""

from __future__ import annotations

import base64
import html
import re

from forensics.render import Report, Section
from forensics.render.cells import fmt_cell

# Markdown's own punctuation in data (a thread may call itself `*[x](javascript:..)*`), escaped with a
# backslash so it prints as itself; HTML is escaped as the html report does (Markdown passes raw HTML).
_MARKDOWN_PUNCTUATION = re.compile(r"([\\`*_\[\]|~])")


def _escape(text: str) -> str:
    """A data value (a thread name, a command line, a cell) as literal text in one table cell."""
    return _MARKDOWN_PUNCTUATION.sub(r"\\\1", html.escape(text, quote=False)).replace("\n", " ")


def _prose(text: str) -> str:
    """The toolkit's own sentences (which may quote names): HTML escaped, Markdown kept."""
    return html.escape(text, quote=False)


def _section(section: Section, origin_ns: int | None) -> list[str]:
    level = min(max(section.level, 2), 4)
    out = ["#" * level + " " + _prose(section.title.strip()), ""]
    if section.text:
        out.extend([_prose(section.text), ""])
    if section.image is not None:
        data = base64.b64encode(section.image).decode("ascii")
        alt = _escape(section.image_alt or section.title).replace("]", ")").replace("[", "(")
        out.extend([f"![{alt}](data:image/png;base64,{data})", ""])
        if section.image_alt:
            out.extend([f"*{_escape(section.image_alt)}*", ""])
    frame = section.frame
    if frame is None or frame.empty:
        if section.empty:
            out.extend([f"_{section.empty}_", ""])
    else:
        columns = section.columns or {c: c for c in frame.columns if c != section.detail}
        names = [c for c in columns if c in frame.columns]
        details = frame[section.detail].tolist() if section.detail and section.detail in frame else None
        numbered = details is not None
        headers = (["#"] if numbered else []) + [_escape(columns[c]) or " " for c in names]
        out.append("| " + " | ".join(headers) + " |")
        out.append("|" + "|".join("---" for _ in headers) + "|")
        for i, row in enumerate(frame[names].itertuples(index=False, name=None)):
            cells = [_escape(fmt_cell(c, v, origin_ns)) for c, v in zip(names, row, strict=True)]
            out.append("| " + " | ".join(([str(i + 1)] if numbered else []) + cells) + " |")
        out.append("")
        if details is not None:
            for i, text in enumerate(details):
                if isinstance(text, str) and text:
                    out.append(f"{i + 1}. {_escape(text)}")
            out.append("")
    if section.note:
        out.extend([f"> {_prose(section.note)}", ""])
    return out


def render_markdown(report: Report) -> str:
    title = _prose(report.title).splitlines()
    lines = [f"# {line}" if i == 0 else line for i, line in enumerate(title)] + [""]
    for section in report.sections:
        lines.extend(_section(section, report.origin_ns))
    for note in report.notes:
        lines.extend([_prose(note), ""])
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines) + "\n"
