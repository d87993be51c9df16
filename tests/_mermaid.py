"""Mermaid's own renderer in a real headless browser: does each diagram parse and draw?

One HTML page embeds the mermaid package (npm, installed by .ci/run into build/mermaid) and calls
``mermaid.parse`` then ``mermaid.render`` on every diagram, writing each result into the page;
headless Chromium (Debian's package) runs it and dumps the DOM, which is read back here. Absent
locally, the caller skips saying why; under CI (CI=true) it fails: CI must not skip it silently.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MERMAID_JS = ROOT / "build" / "mermaid" / "node_modules" / "mermaid" / "dist" / "mermaid.min.js"
BROWSERS = ("chromium", "chromium-browser")
INSTALL = (
    "apt-get install -y --no-install-recommends chromium; "
    "npm install --no-audit --no-fund --prefix build/mermaid mermaid@11 (as .ci/run does)"
)
# Virtual time the page may use (ms): rendering is real work, done before virtual time moves on.
VIRTUAL_TIME_MS = 20_000
BROWSER_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--allow-file-access-from-files",
    f"--virtual-time-budget={VIRTUAL_TIME_MS}",
)
PAGE = """<!doctype html><html><head><meta charset="utf-8"><script src="{script}"></script></head>
<body><pre id="results">pending</pre><script type="application/json" id="diagrams">{diagrams}</script>
<script>
(async () => {{
  const results = [];
  mermaid.initialize({{startOnLoad: false, securityLevel: "strict"}});
  const diagrams = JSON.parse(document.getElementById("diagrams").textContent);
  for (let i = 0; i < diagrams.length; i++) {{
    try {{
      await mermaid.parse(diagrams[i]);
      const drawn = await mermaid.render("diagram" + i, diagrams[i]);
      results.push({{index: i, ok: drawn.svg.includes("<svg"), error: ""}});
    }} catch (err) {{
      results.push({{index: i, ok: false, error: String((err && err.message) || err)}});
    }}
  }}
  document.getElementById("results").textContent = JSON.stringify(results);
}})();
</script></body></html>
"""


def browser() -> str | None:
    return next((path for path in map(shutil.which, BROWSERS) if path), None)


def missing() -> str | None:
    """Why diagrams cannot be rendered here (what to install), or None."""
    absent = [what for what, there in (("chromium", browser() is not None), (str(MERMAID_JS), MERMAID_JS.is_file())) if not there]
    return f"{' and '.join(absent)} not installed; fix: {INSTALL}" if absent else None


def version() -> str:
    """The installed mermaid package's version."""
    return str(json.loads((MERMAID_JS.parents[1] / "package.json").read_text(encoding="utf-8"))["version"])


def render(diagrams: Sequence[str]) -> list[dict[str, Any]]:
    """``{"index", "ok", "error"}`` for each diagram, in order."""
    chromium = browser()
    assert chromium is not None and MERMAID_JS.is_file(), missing()
    with tempfile.TemporaryDirectory(prefix="fd-mermaid-") as tmp:
        page = Path(tmp) / "page.html"
        data = json.dumps(list(diagrams)).replace("</", "<\\/")  # no diagram can close the script element
        page.write_text(PAGE.format(script=MERMAID_JS.as_uri(), diagrams=data), encoding="utf-8")
        profile = Path(tmp) / "profile"
        done = subprocess.run(
            [chromium, *BROWSER_FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "HOME": tmp},
        )
    found = re.search(r'<pre id="results">(.*?)</pre>', done.stdout, re.S)
    assert found is not None, f"chromium dumped no results (exit {done.returncode}): {done.stderr[-2000:]}"
    text = html.unescape(found.group(1))
    assert text != "pending", f"the page did not finish within {VIRTUAL_TIME_MS} ms of virtual time"
    results: list[dict[str, Any]] = json.loads(text)
    return results
