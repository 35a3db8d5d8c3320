"""runs.html in a real headless browser (Debian's chromium + chromedriver, driven by selenium),
opened from disk: load, filter by chips, group, expand a row, hover a run-id, screenshot."""
from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from martingale.table import write_table

from projcopy import FIXTURE, proj, run_files, write_eval, write_run  # noqa: F401 (proj: fixture)

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = [pytest.mark.slow, pytest.mark.real("browser")]   # Debian's chromium + chromium-driver
N_RUNS = len(run_files(FIXTURE))   # the page shows the fixture campaign (the proj fixture)

# Without the background-networking flags Chromium stalls on this closed network.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1400,1000")

# A 2x2 PNG: a plot for the expanded row to show.
PNG = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x02\x00\x00\x00\x02\x08\x02\x00\x00\x00\xfd\xd4\x9as"
       b"\x00\x00\x00\x16IDATx\x9cc\xf8\xcf\xc0\xc0\xf0\x9f\x81\x81\x81\x01\x00\x1f\xf0\x03\xfd\xe9\xa6\xd3"
       b"\xc2\x00\x00\x00\x00IEND\xaeB`\x82")


def finish(root: Path, run_id: str, brier: float) -> None:
    write_eval(root, run_id, {"s0": {"brier": 0.2}, "s1": {
        "n": 1000, "brier": brier, "brier_ci": [brier - 0.01, brier + 0.01], "ms": 0.05, "ms_ci": [0.01, 0.09]}})
    plots = root / "results" / run_id / "plots"
    plots.mkdir(parents=True)
    (plots / "delta_vs_prior.png").write_bytes(PNG)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=opts, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


@pytest.fixture
def page(proj, browser):
    finish(proj, "A-on-D", 0.15)
    finish(proj, "D", 0.18)
    write_run(proj, "D-snap.yaml", "parent: D\nknob: elicit=snap\ninvalid: \"read the wrong cut\"\n")
    write_table(proj)
    browser.get((proj / "runs.html").as_uri())
    return browser


def rows(driver):
    return [r.get_attribute("data-run") for r in driver.find_elements("css selector", "tr.run")]


def chip(driver, facet, value):
    return driver.find_element("css selector", f'button.chip[data-facet="{facet}"][data-value="{value}"]')


def test_page_loads_from_disk_with_one_row_per_run_and_no_errors(page):
    n_runs = len(json.loads(Path(page.current_url[len("file://"):]).with_name("runs.json").read_text()))
    assert len(rows(page)) == n_runs == N_RUNS
    assert f"{N_RUNS} of {N_RUNS} runs shown" in page.find_element("id", "summary").text
    severe = [e for e in page.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == []


def test_state_chip_filters_and_a_second_facet_narrows(page):
    chip(page, "state", "done").click()
    assert sorted(rows(page)) == ["A-on-D", "D"]
    chip(page, "claim", "(none)").click()    # both facets must hold: every done run claims C1
    assert rows(page) == []
    chip(page, "claim", "(none)").click()
    chip(page, "claim", "C1").click()
    chip(page, "state", "done").click()      # off again: every C1 run
    assert "D-snap" not in rows(page) and "A-on-D" in rows(page) and len(rows(page)) < N_RUNS
    chip(page, "state", "invalid").click()
    chip(page, "claim", "C1").click()
    assert rows(page) == ["D-snap"]


def test_group_by_parent_adds_a_header_per_parent(page):
    from selenium.webdriver.support.ui import Select

    Select(page.find_element("id", "group-by")).select_by_value("parent")
    groups = [g.text for g in page.find_elements("css selector", "tr.group")]
    from martingale.config.runs import RunTree
    tree = RunTree.load(FIXTURE / "conf", compose=False)
    children_of_d = sum(tree.specs[r].parent == "D" for r in tree.ids())
    assert f"parent: D ({children_of_d})" in groups and any(g.startswith("parent: (root)") for g in groups)


def test_a_row_expands_to_lineage_knob_metrics_plots_and_provenance(page):
    page.find_element("css selector", 'tr.run[data-run="A-on-D"]').click()
    detail = page.find_element("css selector", 'tr.detail[data-run="A-on-D"]')
    text = detail.text
    assert "base → D (start=D) → A-on-D (stages.s1.reward=A)" in text
    assert "0.1500 [0.1400, 0.1600]" in text and "+0.050 [+0.010, +0.090]" in text
    assert "sha256:" in text and "results/A-on-D/eval.json" in text
    img = detail.find_element("css selector", "img")
    assert page.execute_script("return arguments[0].complete && arguments[0].naturalWidth", img) == 2


def test_hovering_a_run_id_shows_its_card(page):
    from selenium.webdriver import ActionChains

    card = page.find_element("id", "card")
    assert not card.is_displayed()
    cell = page.find_element("css selector", 'tr.run[data-run="D-snap"] td.run-id')
    ActionChains(page).move_to_element(cell).perform()
    assert card.is_displayed()
    assert "D-snap" in card.text and "elicit=snap" in card.text and "invalid: read the wrong cut" in card.text


def test_screenshot_of_the_expanded_page(page, tmp_path):
    page.find_element("css selector", 'tr.run[data-run="A-on-D"]').click()
    shot = tmp_path / "runs.png"
    assert page.save_screenshot(str(shot))
    data = shot.read_bytes()
    width, height = struct.unpack(">II", data[16:24])
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and width >= 1000 and height >= 600


def test_the_findings_forest_plot_is_shown_under_the_table(proj, browser):
    """With a finding that has a result, `martingale table` draws findings-forest.png and the page
    shows it, loaded (the image decoded at its size), under the runs table."""
    (proj / "conf" / "findings.yaml").write_text(
        'D-brier:\n  claim: C1\n  log: l\n  statement: s\n  test: {run: D, stage: s1, metric: brier, expect: "> 0"}\n',
        encoding="utf-8")
    finish(proj, "D", 0.18)
    write_table(proj)
    browser.get((proj / "runs.html").as_uri())
    img = browser.find_element("css selector", "img#findings-forest")
    width = browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth", img)
    assert width == struct.unpack(">I", (proj / "findings-forest.png").read_bytes()[16:20])[0] > 600
    assert img.is_displayed() and browser.find_element("css selector", "table#runs").location["y"] < img.location["y"]
