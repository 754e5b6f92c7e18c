"""Every chapter is registered, in the table of contents, has one title and a parameters cell."""
import re
from pathlib import Path

import yaml

from rankcollapse.chapters import CHAPTERS, schema

REPO = Path(__file__).resolve().parents[1]


def markdown_lines(text):
    """Lines of the chapter outside code cells and front matter."""
    body = text.split("\n---\n", 1)[1] if text.startswith("---") else text
    out, fence = [], False
    for line in body.splitlines():
        if line.startswith("```"):
            fence = not fence
            continue
        if not fence:
            out.append(line)
    return out


def test_registry_matches_toc():
    toc = yaml.safe_load((REPO / "_toc.yml").read_text())
    in_toc = [Path(c["file"]).stem for part in toc["parts"] for c in part["chapters"]]
    notebooks = [c for c in in_toc if c in CHAPTERS]
    assert notebooks == list(CHAPTERS), "chapters in _toc.yml and the registry differ (or their order does)"


def test_each_chapter_has_one_title_and_a_parameters_cell():
    titles = []
    for name in CHAPTERS:
        text = (REPO / "chapters" / f"{name}.md").read_text()
        heads = [l for l in markdown_lines(text) if re.match(r"^# ", l)]
        assert len(heads) == 1, f"{name}: {len(heads)} top-level titles {heads}"
        titles.append(heads[0])
        assert re.search(r":tags: \[parameters\]", text), f"{name}: no cell tagged parameters"
        assert f'rcnb.start("{name}"' in text, f"{name}: does not validate its parameters with rcnb.start"
        assert {"profile", "device", "seed", "output_dir"} <= set(schema(name).names())
    assert len(set(titles)) == len(titles), "two chapters share a title"
