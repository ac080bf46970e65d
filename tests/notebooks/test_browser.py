"""The tour in a real browser: JupyterLab on 127.0.0.1 with the project's kernel and Lab settings
(``.jupyter/lab/settings``, as ``make lab`` uses them), driven in headless Chromium (Debian's
``chromium`` and ``chromium-driver``; ``.ci/run`` installs them). Every cell runs; every control has
a usable size; every slider is dragged with the mouse and its figure is redrawn at the value its
readout shows, at its own size (not shrunk to the cell, so its labels keep their size; the pages
view is dragged to block size 1, its most crowded drawing); no news pop-up covers the page. Screenshots are kept in ``build/browser/``.

Skipped, saying why, where no Chromium, chromedriver or selenium can be found.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from paged.experiments.notebook.kernel import KERNEL_NAME

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "build" / "browser"
pytestmark = pytest.mark.slow

#: Flags for a headless Chromium on a closed network: no sandbox (root in a container), no GPU,
#: nothing fetched in the background, a fresh profile.
CHROMIUM_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                  "--no-first-run", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--disable-extensions", "--window-size=1400,1800")


def _find(*names: str) -> str | None:
    for name in names:
        found = shutil.which(name) or (name if os.path.isfile(name) and os.access(name, os.X_OK) else None)
        if found:
            return found
    return None


CHROMIUM = _find("chromium", "chromium-browser", "google-chrome")
CHROMEDRIVER = _find("chromedriver", "/usr/lib/chromium/chromedriver")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path):
    """A JupyterLab server on 127.0.0.1 over a copy of the tour; yields (url, token)."""
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip("no headless browser: install Debian's chromium and chromium-driver "
                    "(apt-get install -y chromium chromium-driver; .ci/run does)")
    pytest.importorskip("selenium", reason="selenium is missing: pip install -e '.[dev]'")
    (tmp_path / "notebooks").mkdir()
    shutil.copy(ROOT / "notebooks" / "00_tour.ipynb", tmp_path / "notebooks")
    settings = tmp_path / "settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    # Render every cell (no windowing), so the test sees all outputs without scrolling.
    (settings / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    port, token = _free_port(), "paged-browser-test"
    env = {**os.environ, "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces"), "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "JUPYTER_CONFIG_DIR": str(tmp_path / "config")}
    args = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
            f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={tmp_path / 'notebooks'}",
            "--LabApp.expose_app_in_browser=True", f"--LabApp.app_settings_dir={ROOT / '.jupyter' / 'lab' / 'settings'}",
            "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--KernelManager.transport_encryption=auto"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        args.append("--allow-root")
    log = open(tmp_path / "lab.log", "w")
    server = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not start:\n{(tmp_path / 'lab.log').read_text()[-3000:]}")
                time.sleep(0.5)
        yield url, token, tmp_path
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def _browser(profile: Path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)


# The notebook panel: the main-area widget with a session (headless, no widget has focus).
_PANEL = "Array.from(window.jupyterapp.shell.widgets('main')).find(w => w.sessionContext && w.content)"
_KERNEL_READY = """
const app = window.jupyterapp; const panel = app && """ + _PANEL + """;
const kernel = panel && panel.sessionContext && panel.sessionContext.session && panel.sessionContext.session.kernel;
return kernel && kernel.status === 'idle' && panel.content.widgets.length > 0 ? kernel.name : null;
"""
_STATE = """
const panel = """ + _PANEL + """;
const cells = panel.content.widgets.map(c => c.model.toJSON()).filter(c => c.cell_type === 'code');
return {kernel: panel.sessionContext.session.kernel.status,
        executed: cells.filter(c => c.execution_count !== null).length, code: cells.length,
        errors: cells.flatMap(c => c.outputs.filter(o => o.output_type === 'error').map(o => o.ename + ': ' + o.evalue)),
        images: document.querySelectorAll('.jp-OutputArea-output img').length,
        sliders: document.querySelectorAll('.widget-slider .noUi-handle').length};
"""


_FIRST_IMAGE_SRC = "const img = document.querySelector('.jp-OutputArea-output img'); return img ? img.src : null;"
_READOUT = "const r = document.querySelectorAll('.widget-slider .widget-readout')[arguments[0]]; return r ? r.textContent : null;"


def _wait(driver, what, predicate, timeout: float):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / "failure.png"))
    pytest.fail(f"timed out waiting for {what} (screenshot: build/browser/failure.png)")


# Per cell with controls: its sliders (description, track width, readout), dropdowns (description,
# width, value), and the latest figure output of the cell's model (its PNG and explorer metadata).
_CONTROLS = """
const panel = """ + _PANEL + """;
return panel.content.widgets.map((cell, index) => {
  const node = cell.node;
  const sliders = Array.from(node.querySelectorAll('.widget-slider')).map(el => {
    const label = el.querySelector('.widget-label'), track = el.querySelector('.noUi-target');
    return {description: label.textContent, label_clipped: label.scrollWidth > label.clientWidth + 1,
            track: track ? track.getBoundingClientRect().width : 0,
            readout: el.querySelector('.widget-readout').textContent.trim()};
  });
  const dropdowns = Array.from(node.querySelectorAll('.widget-dropdown')).map(el => {
    const label = el.querySelector('.widget-label'), select = el.querySelector('select');
    return {description: label.textContent, label_clipped: label.scrollWidth > label.clientWidth + 1,
            width: select.getBoundingClientRect().width, value: select.options[select.selectedIndex].text};
  });
  if (!sliders.length && !dropdowns.length) return null;
  const outputs = cell.model.outputs ? cell.model.outputs.toJSON() : [];
  const figure = outputs.filter(o => o.data && o.data['image/png']).pop();
  const img = node.querySelector('.jp-OutputArea-output img');
  return {index, sliders, dropdowns, png: figure ? figure.data['image/png'] : null,
          meta: figure && figure.metadata ? figure.metadata.paged_explorer || null : null,
          shown: img ? img.src : null, img_width: img ? img.getBoundingClientRect().width : 0,
          img_natural: img ? +(img.getAttribute('width') || img.naturalWidth) : 0};
}).filter(c => c);
"""
def _blocks(n: int) -> str:
    return f"{n} block{'s' * (n != 1)}"


#: What a redrawn figure must say for the controls' readouts (cell order of the tour: reservation,
#: pages, block tables, sharing, batch, scheduler); ``v`` maps a control's description to its readout.
_SAYS = {
    "tour_reservation": lambda v: f"{int(v['prompt tokens']) + int(v['answer tokens actually generated'])} tokens in a",
    "tour_pages": lambda v: f"{v['tokens generated']} tokens in {_blocks(-(-int(v['tokens generated']) // int(v['block size (tokens)'])))} "
                            f"of {v['block size (tokens)']}",
    "tour_block_table": lambda v: f"logical {-(-7 // int(v['block size (words)'])) - 1}" if v["request"] == "0" else "logical 0",
    "tour_sharing": lambda v: "used instead of",
    "tour_batch": lambda v: f"{v['requests at once']} requests:",
    "tour_scheduler": lambda v: f"{v['system']}, step {v['step']} (",
}
#: Where on its track each slider is dragged to (a fraction of the track): inside every slider's
#: possible settings, and the scheduler's step slider to its end, the replay's last step.
_DRAG_TO = {"step": 1.0, "answer tokens actually generated": 0.45, "requests at once": 0.2,
            "block size (tokens)": 0.0}  # the pages view at block size 1, its most crowded drawing


def _drag(driver, cell: int, slider: int, fraction: float) -> None:
    """Press the mouse on a slider's handle, move it to ``fraction`` of the track, release."""
    from selenium.webdriver.common.action_chains import ActionChains

    handle, track = driver.execute_script(
        "const panel = " + _PANEL + "; const el = panel.content.widgets[arguments[0]].node"
        ".querySelectorAll('.widget-slider')[arguments[1]]; el.scrollIntoView({block: 'center'});"
        "return [el.querySelector('.noUi-handle'), el.querySelector('.noUi-target')];", cell, slider)
    box = driver.execute_script("const r = arguments[0].getBoundingClientRect(), t = arguments[1].getBoundingClientRect();"
                                "return [r.left + r.width / 2, t.left, t.width];", handle, track)
    target = box[1] + fraction * box[2] + (3 if fraction >= 1 else 0)
    ActionChains(driver).move_to_element(handle).click_and_hold().move_by_offset(round(target - box[0]), 0) \
        .release().perform()


def test_tour_runs_its_controls_are_usable_and_a_dragged_slider_redraws_its_figure(lab):
    from selenium.webdriver.common.by import By
    from selenium.common.exceptions import StaleElementReferenceException

    url, token, tmp = lab
    driver = _browser(tmp / "chromium-profile")
    try:
        driver.get(f"{url}/lab/tree/00_tour.ipynb?token={token}")
        assert _wait(driver, "the notebook and its kernel", lambda: driver.execute_script(_KERNEL_READY), 180) == KERNEL_NAME
        driver.execute_script("window.jupyterapp.commands.execute('notebook:run-all-cells')")
        state = _wait(driver, "every cell to run", lambda: (lambda s: s if s["executed"] == s["code"]
                      and s["kernel"] == "idle" and s["images"] >= 6 else None)(driver.execute_script(_STATE)), 240)
        assert state["errors"] == [], state["errors"]
        assert state["images"] == 6 and state["sliders"] >= 10  # six figures; every explorer's sliders rendered
        time.sleep(0.5)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / "tour.png"))
        assert "Jupyter news" not in driver.find_element(By.TAG_NAME, "body").text  # no news pop-up

        cells = driver.execute_script(_CONTROLS)
        assert len(cells) == 6
        for cell in cells:  # every control has a usable size and shows its whole description
            for slider in cell["sliders"]:
                assert slider["track"] >= 150, f"slider {slider['description']!r}: track {slider['track']:.0f} px wide"
                assert not slider["label_clipped"], f"slider {slider['description']!r}: description cut"
            for dropdown in cell["dropdowns"]:
                assert dropdown["width"] >= 80, f"dropdown {dropdown['description']!r}: {dropdown['width']:.0f} px wide"
                assert not dropdown["label_clipped"], f"dropdown {dropdown['description']!r}: description cut"

        for cell in cells:
            for i, slider in enumerate(cell["sliders"]):
                before = next(c for c in driver.execute_script(_CONTROLS) if c["index"] == cell["index"])
                _drag(driver, cell["index"], i, _DRAG_TO.get(slider["description"], 0.5))
                def moved():
                    now = next(c for c in driver.execute_script(_CONTROLS) if c["index"] == cell["index"])
                    done = (now["sliders"][i]["readout"] != before["sliders"][i]["readout"] and now["meta"]
                            and now["png"] != before["png"] and driver.execute_script(_STATE)["kernel"] == "idle")
                    return now if done else None
                now = _wait(driver, f"slider {slider['description']!r} to move and its figure to be redrawn", moved, 90)
                time.sleep(0.5)  # the last display update reaches the page after the kernel goes idle
                now = next(c for c in driver.execute_script(_CONTROLS) if c["index"] == cell["index"])
                readouts = {s["description"]: s["readout"] for s in now["sliders"]}
                readouts.update({d["description"]: d["value"] for d in now["dropdowns"]})
                meta = now["meta"]
                # The figure on the page is the one the kernel drew last, at the values the readouts show.
                assert now["shown"].endswith(now["png"].strip()), "the page shows another figure than the kernel's last"
                assert not meta["message"], f"{slider['description']!r} dragged to an impossible setting: {meta['text']}"
                drawn = {str(v) for v in meta["values"].values()}
                assert set(readouts.values()) <= drawn | set(readouts.values()) and \
                    sorted(map(str, meta["values"].values())) == sorted(readouts.values()), (readouts, meta["values"])
                # shown at its own size, not shrunk to the cell: its labels keep their legible size
                assert now["img_width"] >= now["img_natural"] - 1, (meta["name"], now["img_width"], now["img_natural"])
                expected = _SAYS[meta["name"]](readouts)
                assert any(expected in text for text in meta["text"]), (expected, meta["text"])
        shot = next(c for c in driver.execute_script(_CONTROLS) if c["sliders"][0]["description"] == "step")
        driver.execute_script("const panel = " + _PANEL + "; panel.content.widgets[arguments[0]].node.scrollIntoView();",
                              shot["index"])
        time.sleep(0.3)
        driver.save_screenshot(str(ARTIFACTS / "tour_after_drags.png"))
        for _ in range(3):  # a late redraw may still replace the element between finding and shooting it
            try:
                driver.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output img")[0].screenshot(
                    str(ARTIFACTS / "tour_reservation_after_slider.png"))
                break
            except StaleElementReferenceException:
                time.sleep(0.5)
        assert driver.execute_script(_STATE)["errors"] == []
        # make lab's kernels connect with CurveZMQ keys: no "running over TCP without encryption" warning
        assert "without encryption" not in (tmp / "lab.log").read_text()
    finally:
        driver.quit()


def test_an_executed_tour_reads_without_running_it(lab):
    """The tour as make reproduce saves it, opened in JupyterLab and not run: its six figures are on
    the page, and no control shows as a raw widget repr or an error."""
    from selenium.webdriver.common.by import By

    from paged.experiments.notebook.execute import run_notebook

    url, token, tmp = lab
    run_notebook(ROOT / "notebooks" / "00_tour.ipynb", tmp / "notebooks" / "executed_tour.ipynb",
                 {"sched_num_requests": 6}, figures=tmp / "figures")
    driver = _browser(tmp / "chromium-profile-executed")
    try:
        driver.get(f"{url}/lab/tree/executed_tour.ipynb?token={token}")
        count = "return document.querySelectorAll('.jp-OutputArea-output img').length;"
        _wait(driver, "the saved figures", lambda: driver.execute_script(count) >= 6, 120)
        time.sleep(1.0)  # the widget outputs render after the images
        text = driver.find_element(By.TAG_NAME, "body").text
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / "executed_tour.png"))
        assert driver.execute_script(count) == 6
        assert "HBox(children" not in text and "IntSlider(" not in text
        assert "Error displaying widget" not in text
    finally:
        driver.quit()
