"""The tour in a real browser: JupyterLab on 127.0.0.1 with the project's kernel, driven in headless
Chromium (Debian's ``chromium`` and ``chromium-driver``; ``.ci/run`` installs them), every cell run,
a slider moved, the figure redrawn. Screenshots are kept in ``build/browser/``.

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

from paged.experiments.notebook.parameters import project_kernel

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
    if project_kernel() != "paged":
        pytest.skip("the project's kernel 'paged' is not installed (make venv installs it)")
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
            "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
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


def test_tour_runs_and_a_slider_redraws_its_figure(lab):
    from selenium.webdriver.common.by import By
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.keys import Keys

    url, token, tmp = lab
    driver = _browser(tmp / "chromium-profile")
    try:
        driver.get(f"{url}/lab/tree/00_tour.ipynb?token={token}")
        assert _wait(driver, "the notebook and its kernel", lambda: driver.execute_script(_KERNEL_READY), 180) == "paged"
        driver.execute_script("window.jupyterapp.commands.execute('notebook:run-all-cells')")
        state = _wait(driver, "every cell to run", lambda: (lambda s: s if s["executed"] == s["code"]
                      and s["kernel"] == "idle" and s["images"] >= 6 else None)(driver.execute_script(_STATE)), 240)
        assert state["errors"] == [], state["errors"]
        assert state["images"] == 6 and state["sliders"] >= 10  # six figures; every explorer's sliders rendered
        # Read the page in one script each time: a redraw replaces the <img> element, so a handle found
        # earlier goes stale (StaleElementReferenceException) between finding it and reading it.
        before = driver.execute_script(_FIRST_IMAGE_SRC)  # the reservation view
        value = driver.execute_script(_READOUT, 1)  # "answer tokens actually generated"
        handle = driver.find_elements(By.CSS_SELECTOR, ".widget-slider .noUi-handle")[1]
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", handle)
        handle.click()
        for _ in range(3):
            handle.send_keys(Keys.ARROW_RIGHT)
        _wait(driver, "the figure to be redrawn", lambda: driver.execute_script(_FIRST_IMAGE_SRC) not in (before, None), 90)
        assert driver.execute_script(_READOUT, 1) != value
        _wait(driver, "the redraws to finish", lambda: driver.execute_script(_STATE)["kernel"] == "idle", 90)
        time.sleep(0.5)  # the last display update reaches the page after the kernel goes idle
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / "tour.png"))
        for _ in range(3):  # a late redraw may still replace the element between finding and shooting it
            try:
                driver.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output img")[0].screenshot(
                    str(ARTIFACTS / "tour_reservation_after_slider.png"))
                break
            except StaleElementReferenceException:
                time.sleep(0.5)
        assert driver.execute_script(_STATE)["errors"] == []
    finally:
        driver.quit()
