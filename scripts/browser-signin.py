#!/usr/bin/env python3
"""Signs in to the audit pages in headless Chromium, driven over the DevTools protocol on a pipe
(--remote-debugging-pipe: no port, no websocket, the standard library only), as a person would:
open a page, be sent to /ui/login, type the token, submit, land on the page asked for.

usage: browser-signin.py CHROMIUM BASE_URL TOKEN PATH SCREENSHOT.png PROFILE_DIR
       browser-signin.py CHROMIUM BASE_URL --resolve PATH SCREENSHOT.png PROFILE_DIR
(--resolve: on a server without tokens, open PATH, an entity's page, and press its first
"Keep loser" button; prints where it landed and how many open conflicts the page still has)
Prints one JSON object: where each step landed, what the page's script can see of cookies, and
the body's data-page. Exits 1 when the browser does not answer in time.
"""
import base64, json, os, select, subprocess, sys, time

chromium, base, token, path, shot, profile = sys.argv[1:7]
# Descriptors inherited from whoever started us (a test runner's sockets) are not the browser's
# to hold: a socket kept open by a browser is a connection its peer never sees closed.
os.closerange(3, 65536)
to_browser_r, to_browser_w = os.pipe()
from_browser_r, from_browser_w = os.pipe()


# Chromium reads commands on fd 3 and writes answers on fd 4.
def setup():
    # Through a spare fd, so that a pipe already at 3 or 4 is neither lost nor left close-on-exec.
    a, b = os.dup(to_browser_r), os.dup(from_browser_w)
    os.dup2(a, 3)
    os.dup2(b, 4)
    os.set_inheritable(3, True)
    os.set_inheritable(4, True)
    os.closerange(5, 65536)


proc = subprocess.Popen(
    [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
     "--disable-extensions", "--remote-debugging-pipe", "--user-data-dir=" + profile, "--window-size=1280,900", "about:blank"],
    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(profile + ".log", "w"),
    # fds 3 and 4 are made in the child after the fork; closing other fds would close them too.
    preexec_fn=setup, close_fds=False)
os.close(to_browser_r)
os.close(from_browser_w)
out = os.fdopen(to_browser_w, "wb", buffering=0)
inp = os.fdopen(from_browser_r, "rb", buffering=0)
buffer = b""
events = []  # events that arrived while an answer was awaited
next_id = 0
deadline = time.time() + 60


def read_message():
    global buffer
    while b"\0" not in buffer:
        left = deadline - time.time()
        if left <= 0 or not select.select([inp], [], [], left)[0]:
            raise TimeoutError("the browser did not answer in time")
        chunk = os.read(inp.fileno(), 65536)
        if not chunk:
            raise EOFError("the browser closed its pipe")
        buffer += chunk
    message, buffer = buffer.split(b"\0", 1)
    return json.loads(message)


def send(method, params=None, session=None):
    global next_id
    next_id += 1
    message = {"id": next_id, "method": method, "params": params or {}}
    if session:
        message["sessionId"] = session
    out.write(json.dumps(message).encode() + b"\0")
    while True:
        m = read_message()
        if m.get("id") == next_id:
            if "error" in m:
                raise RuntimeError(f"{method}: {m['error']}")
            return m.get("result", {})
        if "method" in m:
            events.append(m)


def wait_event(name, session):
    for i, m in enumerate(events):
        if m.get("method") == name and m.get("sessionId") == session:
            del events[: i + 1]
            return m
    while True:
        m = read_message()
        if m.get("method") == name and m.get("sessionId") == session:
            events.clear()
            return m


def evaluate(expression, session):
    return send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session)["result"].get("value")


try:
    target = send("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    send("Page.enable", session=session)
    result = {}
    if token == "--resolve":
        send("Page.navigate", {"url": base + path}, session)
        wait_event("Page.loadEventFired", session)
        result["forms_before"] = evaluate("document.querySelectorAll('form.resolve').length", session)
        evaluate("document.querySelector('form.resolve button[value=loser]').click(); true", session)
        wait_event("Page.loadEventFired", session)
        result["after"] = evaluate("location.pathname", session)
        result["after_page"] = evaluate("document.body.dataset.page", session)
        result["forms_after"] = evaluate("document.querySelectorAll('form.resolve').length", session)
        png = send("Page.captureScreenshot", {"format": "png"}, session)["data"]
        with open(shot, "wb") as f:
            f.write(base64.b64decode(png))
        print(json.dumps(result))
        sys.stdout.flush()
        try:
            send("Browser.close")
        except Exception:
            pass
        sys.exit(0)
    send("Page.navigate", {"url": base + path}, session)
    wait_event("Page.loadEventFired", session)
    result["first"] = evaluate("location.pathname + location.search", session)
    result["first_page"] = evaluate("document.body.dataset.page", session)
    result["first_shows_data"] = evaluate("document.querySelectorAll('tr[id^=e-]').length", session)
    # A person types the token and presses the button (DevTools evaluation is not bound by the
    # page's Content-Security-Policy, which forbids every script of the page itself).
    evaluate("document.querySelector('input[name=token]').value = %s; document.querySelector('form.login button').click(); true" % json.dumps(token), session)
    wait_event("Page.loadEventFired", session)
    result["after"] = evaluate("location.pathname + location.search", session)
    result["after_page"] = evaluate("document.body.dataset.page", session)
    result["after_rows"] = evaluate("document.querySelectorAll('tr[id^=e-]').length", session)
    result["script_sees_cookie"] = evaluate("document.cookie", session)
    result["signed_in_as"] = evaluate("(document.querySelector('form.logout button') || {}).textContent || ''", session)
    # The page's own scripts cannot run: an inline script injected now is refused by the CSP.
    result["inline_script_ran"] = evaluate(
        "(function(){var s=document.createElement('script'); s.textContent='window.__ran=1'; document.body.appendChild(s); return !!window.__ran})()", session)
    png = send("Page.captureScreenshot", {"format": "png"}, session)["data"]
    with open(shot, "wb") as f:
        f.write(base64.b64decode(png))
    # Signing out (the form carries the session's CSRF token), then the page asks again.
    evaluate("document.querySelector('form.logout button').click(); true", session)
    wait_event("Page.loadEventFired", session)
    result["after_signout"] = evaluate("location.pathname", session)
    send("Page.navigate", {"url": base + path}, session)
    wait_event("Page.loadEventFired", session)
    result["again"] = evaluate("document.body.dataset.page", session)
    print(json.dumps(result))
    sys.stdout.flush()
    try:
        send("Browser.close")
    except Exception:
        pass
finally:
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
