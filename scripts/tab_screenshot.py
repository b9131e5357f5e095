"""A picture of TensorBoard's Attention tab side by side ("compare"), each side at its last epoch:

    python scripts/tab_screenshot.py http://127.0.0.1:6006 docs/tensorboard_compare.png "run=0&compare_run=2"
    python scripts/tab_screenshot.py http://127.0.0.1:6006 docs/tensorboard_compare.png "run=0&compare_run=1" all

With "all", the right view shows every head side by side (the tab's "every head" button).

Drives Debian's chromium with Playwright (the dev extra); scripts/readme_pictures.sh calls it."""

import shutil
import sys

from playwright.sync_api import sync_playwright

LAST_EPOCH = "s => { s.value = s.max; s.dispatchEvent(new Event('input')); }"
SHOWS_LAST = """() => {
  const panel = document.querySelector('#panel-left');
  return panel.dataset.shown.endsWith('@' + panel.querySelector('#epoch-slider').max);
}"""


def main(url: str, out: str, runs: str, right_heads: str = "") -> None:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1500, "height": 760})
        page.goto(f"{url}/data/plugin_entry.html?name=attention#compare&{runs}")
        page.wait_for_selector("#panel-right[data-shown]")
        page.eval_on_selector("#panel-left #epoch-slider", LAST_EPOCH)
        page.wait_for_function(SHOWS_LAST)
        if right_heads == "all":
            page.click("#panel-right #model-toggle")
        page.screenshot(path=out)
        browser.close()


if __name__ == "__main__":
    main(*sys.argv[1:5])
