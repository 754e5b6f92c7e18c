"""The README is for users: short, its cost table read from data/costs/ (never typed), and the book's page
on how it is built carries the same table."""

from pathlib import Path

from rankcollapse.book import schedule

REPO = Path(__file__).resolve().parents[1]


def test_the_readme_cost_table_is_what_data_costs_says():
    text = (REPO / "README.md").read_text()
    block = text.split(schedule.README_BEGIN, 1)[1].split(schedule.README_END, 1)[0].strip()
    assert block == schedule.cost_table(REPO).strip(), (
        "README.md's cost table differs from data/costs/: rcbook costs --table --readme"
    )


def test_the_readme_fits_and_opens_with_the_two_commands():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 160, len(lines)
    head = "\n".join(lines[:6])
    assert "bash make.sh book" in head and "bash make.sh test" in head
    import re

    assert not re.search(r"(?i)\bissue\b|(?<![\w/])#\d+", "\n".join(lines)), "history belongs in the book"
    assert "LICENSE" in "\n".join(lines)


def test_the_how_built_page_gets_the_table_when_staged(tmp_path):
    from rankcollapse.book.build import COSTS_MARKER, GPU_MARKER, stage
    from rankcollapse.book.estimates import gpu_table

    src = (REPO / "chapters" / "how-built.md").read_text()
    assert COSTS_MARKER in src and GPU_MARKER in src
    st = stage("smoke", tmp_path, only=[])
    page = (st / "chapters" / "how-built.md").read_text()
    assert COSTS_MARKER not in page and schedule.cost_table(REPO).splitlines()[0] in page
    assert GPU_MARKER not in page and gpu_table() in page


def test_the_cost_table_simulates_every_recorded_profile():
    table = schedule.cost_table(REPO)
    for prof in ("smoke", "full"):
        if (REPO / "data" / "costs" / f"{prof}.json").exists():
            assert f"| `{prof}` |" in table
    assert all(f"{n} cores" in table.splitlines()[0] for n in schedule.SIM_CORES)


def test_the_cost_table_says_when_its_model_misses_the_recorded_wall(tmp_path):
    import json

    doc = json.loads((REPO / "data" / "costs" / "smoke.json").read_text())
    (tmp_path / "data" / "costs").mkdir(parents=True)
    sim2 = schedule.simulate(doc, 2)["wall_s"]
    for wall, marked in ((sim2, False), (sim2 * 1.5, True)):
        (tmp_path / "data" / "costs" / "smoke.json").write_text(json.dumps({**doc, "wall_s": wall}))
        table = schedule.cost_table(tmp_path, profiles=("smoke",))
        assert ("†" in table) == marked and ("-33% off its wall" in table) == marked
