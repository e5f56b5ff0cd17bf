"""test_server_ui.py - the chat page at / end to end in headless Chromium
(Debian chromium + chromium-driver, driven by selenium): load the page, type
a message (max tokens 48, temperature 0 set in the page's fields), press
Enter, and watch the reply stream in (the page counts the
SSE deltas it renders: several must arrive, and the final text must be
non-empty); then a second turn in the same chat. A screenshot goes to
WORK_DIR/server_ui.png (its path is printed).

usage: test_server_ui.py TESSERA_BIN MODELS_DIR WORK_DIR
"""
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_harness import Server, need_model  # noqa: E402


def main():
    binary, models_dir, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    model = need_model(models_dir)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not chromium or not driver:
        print("FAIL: chromium and chromedriver are needed (Debian packages chromium, chromium-driver): "
              "run tools/setup.sh")
        return 1
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        from selenium.webdriver.common.by import By
        from selenium.webdriver.common.keys import Keys
        from selenium.webdriver.support.ui import WebDriverWait
    except ImportError:
        print("FAIL: the Python package selenium is missing: run tools/setup.sh (tools/requirements.txt)")
        return 1

    failures = []

    def check(cond, what):
        print(("ok: " if cond else "FAIL: ") + what)
        if not cond:
            failures.append(what)

    srv = Server(binary, model, ["-t", "1", "-c", "1024"], os.path.join(work, "server_ui.log"))
    browser = None
    try:
        opts = webdriver.ChromeOptions()
        opts.binary_location = chromium
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--window-size=900,700", f"--user-data-dir={os.path.join(work, 'chromium-profile')}"):
            opts.add_argument(arg)
        browser = webdriver.Chrome(service=Service(driver), options=opts)
        browser.set_page_load_timeout(60)
        browser.get(f"http://{srv.host}:{srv.port}/")
        check(browser.title == "tessera chat", f"page title {browser.title!r}")
        wait = WebDriverWait(browser, 120, poll_frequency=0.05)
        wait.until(lambda b: b.find_element(By.ID, "model").text != "")
        check(os.path.basename(model) in browser.find_element(By.ID, "model").text, "page shows the model from /health")
        # bounded, greedy replies: two turns always fit the context
        for field, value in (("max_tokens", "48"), ("temperature", "0")):
            el = browser.find_element(By.ID, field)
            el.clear()
            el.send_keys(value)

        for turn, text in enumerate(["Write a short poem about the sea.", "What is the capital of France?"], 1):
            box = browser.find_element(By.ID, "input")
            box.send_keys(text)
            box.send_keys(Keys.ENTER)
            wait.until(lambda b: b.find_element(By.ID, "status").text in ("done", "error"))
            status = browser.find_element(By.ID, "status").text
            users = browser.find_elements(By.CSS_SELECTOR, ".msg.user")
            replies = browser.find_elements(By.CSS_SELECTOR, ".msg.assistant")
            check(status == "done", f"turn {turn}: status {status!r}"
                  + ("" if status == "done" else f" ({browser.find_element(By.CSS_SELECTOR, '.msg.error').text})"))
            if status != "done":
                break
            reply = replies[-1].text
            chunks = int(replies[-1].get_attribute("data-chunks") or 0)
            check(len(users) == turn and users[-1].text == text, f"turn {turn}: the message is shown")
            check(len(replies) == turn and reply.strip() != "", f"turn {turn}: reply {reply!r}")
            check(chunks >= 2, f"turn {turn}: the reply streamed in {chunks} deltas")
        shot = os.path.join(os.path.abspath(work), "server_ui.png")
        browser.save_screenshot(shot)
        check(os.path.getsize(shot) > 1000, f"screenshot saved: {shot}")
        m = srv.metrics()
        check(m["tessera_prompt_tokens_cached_total"] > 0, "the second turn reused the first turn's KV cache")
    finally:
        if browser:
            browser.quit()
        rc = srv.stop()
        check(rc == 0, f"server exits 0 on SIGTERM (got {rc})")
        if failures:
            print("\n".join(srv.log().splitlines()[-20:]))
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
