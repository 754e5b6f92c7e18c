"""What the book's staging adds to its pages (rankcollapse.book.pages, ledger): rerun sections, the banner
of a build that is not the published book, labels on the sections that decide verdicts, the ledger's short
evidence. Each rule on synthetic input, for each of its outcomes."""

import nbformat

from rankcollapse.book import ledger, pages


def _nb(cells):
    nb = nbformat.v4.new_notebook()
    for kind, src, glue in cells:
        if kind == "md":
            nb.cells.append(nbformat.v4.new_markdown_cell(src))
        else:
            c = nbformat.v4.new_code_cell(src)
            c.outputs = [
                nbformat.v4.new_output(
                    "display_data", data={"text/plain": "'x'"}, metadata={"scrapbook": {"name": g}}
                )
                for g in glue
            ]
            nb.cells.append(c)
    return nb


def test_verdict_sections_are_labelled_above_their_heading():
    nb = _nb(
        [
            ("md", "# Title\n\nintro", []),
            ("md", "text\n## First section\nmore\n```\n# not a heading\n```", []),
            ("code", "judge()", ["verdict-H3", "other"]),
            ("code", "judge()", ["verdict-H4"]),
            ("md", "## Second", []),
            ("code", "judge()", ["verdict-H5", "verdict-H3"]),
        ]
    )
    labels = pages.label_verdict_sections(nb, "repair-path")
    assert labels == {
        "H3": "claim-repair-path-h3",
        "H4": "claim-repair-path-h4",
        "H5": "claim-repair-path-h5",
    }
    lines = nb.cells[1].source.split("\n")
    i = lines.index("## First section")
    assert lines[i - 2 : i] == ["(claim-repair-path-h3)=", "(claim-repair-path-h4)="] and lines[i - 3] == ""
    assert nb.cells[4].source.split("\n")[:2] == ["(claim-repair-path-h5)=", "## Second"]
    assert pages.label_verdict_sections(_nb([("code", "x", ["verdict-C1"])]), "c") == {}  # no heading above


def test_rerun_section_gives_the_commands_and_every_parameter():
    doc = {
        "params": {"profile": "smoke", "device": "auto", "output_dir": "/x", "seeds": [0, 1], "depth": 16}
    }
    text = pages.rerun_markdown("repair-driver", doc)
    assert (
        "rcbook run repair-driver --profile smoke -p depth 16" in text
    )  # depth given; seeds is smoke's own
    assert "papermill - repair-driver.ipynb -p profile smoke -p depth 16" in text
    assert "| `seeds` | `[0, 1]` (differs) |" in text and "| `output_dir`" not in text
    full = pages.rerun_markdown(
        "repair-driver", {"params": {"profile": "full", "device": "cpu", "depth": 12}}
    )
    assert "rcbook run repair-driver --profile full --device cpu\n" in full
    # a long command is broken before its options, never wider than a rerun block
    long = pages.rerun_markdown(
        "repair-treatments",
        {"params": {"profile": "smoke", "seeds": [0, 1, 2, 3, 4, 5, 6, 7], "depth": 16, "d_model": 64}},
    )
    block = long.split("```bash")[2].split("```")[0].strip().splitlines()
    assert len(block) > 2 and all(len(x) <= 80 for x in block)
    assert all(x.endswith(" \\") for x in block[:-1]) and block[1].startswith("  | .venv/bin/papermill")


def test_banner_only_off_the_full_profile():
    assert pages.announcement("full", ["repair-driver"]) is None
    b = pages.announcement("smoke", ["repair-driver", "toy-tasks"])
    assert "smoke" in b and "not the published book" in b and "repair-driver: seeds [0, 1]" in b


def test_ledger_short_evidence():
    v = {
        "evidence": {
            "reason": "no loss term repaired it (penalty 0 of 2, hinge 0 of 2): 0 of 4 branches; "
            "reversed ramp 2 of 2; untreated 0 of 2 (book's threshold)"
        }
    }
    assert ledger.short_evidence(v) == (
        "no loss term repaired it: 0 of 4 branches; reversed ramp 2 of 2; untreated 0 of 2"
    )
    assert ledger.short_evidence(
        {"evidence": {"reason": "held (median 3.04 over 17 runs, kappa 0.17)"}}
    ) == ("held (median 3.04 over 17 runs)")
    assert (
        ledger.short_evidence({"evidence": {"reason": "kept r(X_L) above 0.5"}}) == "kept r(X_L) above 0.5"
    )
    long = {"evidence": {"reason": "; ".join(f"clause {i} with number {i}" for i in range(40))}}
    assert len(ledger.short_evidence(long)) <= 200


def test_ledger_cites_each_claim_s_source():
    assert ledger.cited("Dong Thm 2.2/2.3") == "{cite:t}`dong2021attention`, Thm 2.2/2.3"
    assert ledger.cited("Hofmann, learning-rate test") == "{cite:t}`hofmann2026force`, learning-rate test"
    assert ledger.cited("note") == "{cite:t}`note2021critical`"
    assert ledger.cited("Dongle") == "Dongle"  # a name, not a prefix
    keys = open("references.bib").read()
    assert all(f"{{{k}," in keys for k in ledger.CITE.values())


def test_papers_numbers_beside_ours(tmp_path):
    """Each paper number is read from the chapter's results (never typed), with the ratio where both are
    numbers; a value the build did not measure says so; on the recorded full results most are measured."""
    import json

    from rankcollapse.book import papers
    from rankcollapse.book.records import expected_path

    vals = {"table2": {"value": {"hinge-1x": {"rho_median": 0.1774, "clip_fraction": 0.5}}}}
    rs = {pn.what: (ours, ratio) for pn, ours, ratio in papers.rows("repair-treatments", vals)}
    assert rs["ρ median, hinge-1x"] == (("0.177", 0.1774), "2")  # 0.1774 / 0.0887
    assert rs["ρ median, penalty-1x"] == (None, "–")
    md = papers.chapter_markdown("repair-treatments", vals)
    assert "| ρ median, penalty-1x (Hofmann Table 2) | 0.0032 | not measured in this build | – |" in md
    assert papers.chapter_markdown("decomposition", {}) is None  # the papers report no number of it
    measured = total = 0
    for ch in dict.fromkeys(pn.chapter for pn in papers.NUMBERS):
        values = json.loads(expected_path("full", ch).read_text())["values"]
        for _, ours, _ in papers.rows(ch, values):
            total += 1
            measured += ours is not None
    assert measured >= 0.85 * total, f"only {measured} of {total} paper numbers found in the full records"
    (tmp_path / "collapse").mkdir()
    (tmp_path / "collapse" / "results.json").write_text(
        json.dumps({"values": {"exponent_decaying_median": {"value": 2.9}}})
    )
    page = papers.page(tmp_path, "smoke", ["collapse"])
    assert "| [collapse](collapse.ipynb) | per-layer exponent" in page and "| 2.9 | 0.967 |" in page
    assert "| `repair-path` | " in page  # not built here: no link, and 'not measured'


def test_chapter_names_become_links_in_prose_and_glued_markdown():
    nb = _nb([("md", "See `repair-path` and `repair-path-x`, {doc}`skip`.\n```\n`repair-path`\n```", [])])
    nb.cells.append(nbformat.v4.new_code_cell("g()"))
    nb.cells[-1].outputs = [
        nbformat.v4.new_output("display_data", data={"text/markdown": "as in `skip`; `mlp` not built"})
    ]
    assert pages.link_chapter_names(nb, ["repair-path", "skip"]) == 2
    assert nb.cells[0].source.split("\n")[0] == "See {doc}`repair-path` and `repair-path-x`, {doc}`skip`."
    assert nb.cells[0].source.split("\n")[2] == "`repair-path`"  # inside a code block: untouched
    assert nb.cells[1].outputs[0]["data"]["text/markdown"] == "as in {doc}`skip`; `mlp` not built"


def test_cite_works_cites_the_first_mention_in_prose_only():
    text = (
        "# BERT in a heading\n\n"
        "Dong,\nCordonnier & Loukas (2021) show it; Dong, Cordonnier & Loukas again.\n"
        "A `BERT` code span, $BERT$ in math, [BERT](http://x) a link, all-MiniLM-L6-v2 a name.\n"
        "```python\nBERT = 1\n```\n"
        "BERT's heads first, then BERT proper, then BERT once more; AdamW moments.\n"
        "| BERT | table |\n"
    )
    out = pages.cite_works(text=text)
    assert out.count("{cite:t}`dong2021attention`") == 1 and "Dong, Cordonnier & Loukas again" in out
    assert out.startswith("# BERT in a heading\n")  # headings untouched
    assert "A `BERT` code span, $BERT$ in math, [BERT](http://x) a link, all-MiniLM-L6-v2" in out
    assert "```python\nBERT = 1\n```" in out
    assert "BERT's heads first, then BERT {cite:p}`devlin2019bert` proper, then BERT once more" in out
    assert "AdamW {cite:p}`loshchilov2019decoupled` moments" in out and "wang2020minilm" not in out
    assert "| BERT | table |" in out


def test_cite_works_on_a_notebook_counts_and_skips_outputs():
    nb = {
        "cells": [
            {"cell_type": "markdown", "source": "Hofmann & Mäder (2026) weaken the skip."},
            {
                "cell_type": "code",
                "source": "# Hofmann & Mäder",
                "outputs": [{"data": {"text/markdown": "Hofmann & Mäder"}, "output_type": "display_data"}],
            },
            {"cell_type": "markdown", "source": ["Hofmann & Mäder ", "and the critical note."]},
        ]
    }
    assert pages.cite_works(nb) == 2
    assert nb["cells"][0]["source"] == "{cite:t}`hofmann2026force` weaken the skip."
    assert nb["cells"][1]["source"] == "# Hofmann & Mäder"
    assert nb["cells"][1]["outputs"][0]["data"]["text/markdown"] == "Hofmann & Mäder"
    assert (
        nb["cells"][2]["source"] == "Hofmann & Mäder and the critical note {cite:yearpar}`note2021critical`."
    )


def test_alt_from_captions_gives_each_figure_its_caption_s_first_sentence():
    text = (
        "```{glue:figure} fig-a\n:name: fig-a\n\n$r(X_l)$ against depth; **bold** and `code`, "
        "{numref}`fig-b`, $\\log_{10}\\|x\\|$. Second sentence.\n```\n\n"
        "```{glue:figure} fig-b\n:name: fig-b\n:alt: given\n\nCaption.\n```\n"
        "```python\nx = 1\n```\n"
    )
    out = pages.alt_from_captions(text=text)
    assert ":name: fig-a\n" in out and out.count(":alt:") == 2
    alt = next(ln for ln in out.split("\n") if ln.startswith(":alt:") and "given" not in ln)
    assert alt == ':alt: "r(X_l) against depth; bold and code, fig-b, log_10‖x‖."'
    assert out.index(':alt: "r(X_l)') < out.index(":name: fig-a")  # right after the directive line
    nb = {"cells": [{"cell_type": "markdown", "source": text}, {"cell_type": "code", "source": "x"}]}
    assert pages.alt_from_captions(nb) == 1 and ':alt: "r(X_l)' in nb["cells"][0]["source"]
    assert len(pages.plain_text("word " * 100, limit=50)) <= 50


def test_status_page_says_the_profile_and_device_once(tmp_path):
    """The build status page: the profile (and a device every chapter shares) said above the table, not in a
    column of their own; a device column only where chapters ran on different devices."""
    import json

    from rankcollapse.book import build
    from rankcollapse.book.records import load

    doc = load(build.expected_path("smoke", "mlp"))
    out = tmp_path / "smoke" / "mlp"
    out.mkdir(parents=True)
    (out / "results.json").write_text(json.dumps(doc))
    page = build.status_page("smoke", tmp_path)
    assert "| chapter | wall time (s) | CPU time (s) | matches recorded | verdicts |" in page
    assert f"on the device `{doc['device']}`" in page and "| [mlp](mlp.ipynb) |" in page
    assert "| repair-path | - | - | not run | - |" in page
    other = tmp_path / "smoke" / "skip"
    other.mkdir(parents=True)
    (other / "results.json").write_text(
        json.dumps({**load(build.expected_path("smoke", "skip")), "device": "cuda"})
    )
    page = build.status_page("smoke", tmp_path)
    assert "| device |" in page and "| cuda |" in page


def test_papers_page_labels_the_reopening_factor_and_shows_figures_4_5_7_8():
    """The reopening factor is Hofmann's Figure 2 (bottom); the knife-edge, Figures 7-8 and Figure 4's Q/K
    values have rows, and Figure 8's ranking says whether it is reproduced."""
    from rankcollapse.book import papers
    from rankcollapse.chapters.repair_lr_burst.report import within_multiplier_spearman
    from rankcollapse.chapters.repair_path.report import fig8_text

    src = {pn.what: pn.source for pn in papers.NUMBERS}
    assert src["rise of the Q/K gradient when the skip is restored"] == "Hofmann Fig. 2, bottom"
    path = {pn.source: pn for pn in papers.NUMBERS if pn.chapter == "repair-path"}
    fig8 = path["Hofmann Fig. 8"].ours({"predictor_spearman_time": {"value": 0.06}})
    assert "not reproduced" in fig8[0] and "0.06" in fig8[0]
    assert "not reproduced" in path["Hofmann Fig. 8"].ours({})[0]
    assert "0.44" in path["Hofmann Fig. 7"].ours({"delay_spearman": {"value": 0.44}})[0]
    knife = next(pn for pn in papers.NUMBERS if pn.source == "Hofmann Fig. 5, left")
    assert knife.ours({"knife_alpha": {"value": {"0.02": 1.2, "0.05": 1.4, "0.1": 2.8}}})[1] == 0.05
    assert knife.ours({"knife_alpha": {"value": {"0.02": 1.79}}})[0].startswith("none")
    qk = [pn for pn in papers.NUMBERS if pn.source == "Hofmann Fig. 4, left"]
    vals = {"qk_collapsed_burst_median": {"value": 2.9e-3}, "qk_healthy_median": {"value": 5.3e-2}}
    assert len(qk) == 2 and qk[0].ours(vals)[0].startswith("0.0547")
    assert fig8_text(-0.7).startswith("it is reproduced") and fig8_text(None).startswith("it is not")
    rows = [(16.0, {"final_srank": x}) for x in (1.2, 1.5, 2.0, 2.5)] + [(32.0, {"final_srank": 1.1})]
    txt = within_multiplier_spearman(rows, [1e-3, 2e-3, 3e-3, 4e-3, 1e-4])
    assert "×16 1.00 (4 collapsed)" in txt and "×32 – (1 collapsed)" in txt


def test_papers_row_of_figure_6_middle_reads_the_line_beside_the_random_direction():
    """Figure 6 middle states no number in the paper: the row shows this build's change factors and
    readings, with no ratio."""
    from rankcollapse.book import papers

    pn = next(pn for pn in papers.NUMBERS if pn.source == "Hofmann Fig. 6, middle")
    assert pn.paper_value is None and pn.ours({}) is None
    vals = {
        "f6m_factor": {"value": {"line": {"hinge-1x": 0.03}, "random": {"hinge-1x": 1.3}}},
        "f6m_reading": {"value": {"hinge-1x": {"line": "falls", "random": "stays within a factor 2"}}},
    }
    text, num = pn.ours(vals)
    assert num is None and text.startswith("hinge-1x: ×0.03 falls towards healthy, ×1.3 stays within")
    assert dict((p.what, r) for p, _, r in papers.rows("repair-treatments", vals))[pn.what] == "–"


def test_a_table_cell_of_one_short_token_is_marked_whole():
    """A cell whose text is one token of at most 12 characters (a number, a hyphenated name) is marked
    ``tok`` (the stylesheet never breaks it); a cell of several words or a long token is not: in the HTML
    tables of html_table and, through the Sphinx extension, in Markdown tables."""
    from docutils import nodes

    from rankcollapse.book.html_tables import html_table, is_token
    from rankcollapse.book.sphinxext import _mark_tokens

    assert is_token("2.91e-08") and is_token(" self-heals ") and is_token("123456789012")
    assert not is_token("0 / 2") and not is_token("1234567890123") and not is_token("")
    html = html_table(["seed", "loss minus control"], [["self-heals", "0.5 (median)"]])
    assert '<th class="tok">seed</th><th>loss minus control</th>' in html
    assert '<td class="tok">self-heals</td><td>0.5 (median)</td>' in html
    table = nodes.table()
    short, words = (
        nodes.entry("", nodes.paragraph(text="penalty-1x")),
        nodes.entry("", nodes.paragraph(text="a b")),
    )
    table += nodes.row("", short, words)
    doc = nodes.document(None, None)
    doc += table
    _mark_tokens(None, doc, "x")
    assert short["classes"] == ["tok"] and words["classes"] == []
