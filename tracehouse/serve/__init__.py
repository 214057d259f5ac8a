"""``tracehouse serve``: an interactive, offline, read-only viewer over the marts.

Layers: this package sits above :mod:`tracehouse.reports` (whose headline
gatherer and formatters it calls, so the viewer and the report print the
same numbers) and :mod:`tracehouse.query` (whose read-only connection it
uses), below the CLI. Modules: :mod:`.marts` (read-only cursors, reopened
after a build publishes), :mod:`.params` and :mod:`.cells` (what comes in
and goes out), one module per view (:mod:`.overview`, :mod:`.heatmap`,
:mod:`.drill`, :mod:`.kernels`, :mod:`.timeline`, :mod:`.pipeline`,
:mod:`.annotations`), :mod:`.exports` (CSV, Parquet, Perfetto),
:mod:`.api` (the route table) and
:mod:`.server` (HTTP); the page is ``static/`` (one HTML file, one script,
one style sheet).

Why a page of our own over a JSON API, served by the standard library,
rather than Dash/Plotly or Panel/Bokeh (all three were run offline here;
research/efficiency_whatif_viewer.md §5), measured against the issue's goals:

* **Starts in seconds.** Python's ``http.server`` adds nothing to import;
  ``tracehouse serve`` is up in about a second, most of it DuckDB and
  Jinja2. Dash imports Flask, Plotly and its component suites, Panel imports
  Bokeh and Tornado (each a second or more before the first page), and both
  are large installs (dash + plotly ~100 MB).
* **< 200 ms per interaction at 1,024 ranks × 4 iterations.** What costs
  time is the query, and every view here is one or two bound queries whose
  result is already the size of the screen: the timeline's level of detail
  is computed in SQL per pixel bucket (as Perfetto's mipmap does), so a
  response never grows with the number of kernels. A callback framework
  adds a round of its own (Dash serialises whole figures, ~7.6 MB per
  100,000 rectangles with Plotly, per research §5.5); Bokeh keeps a
  websocket session per page. ``benchmarks/serve.py`` has the figures.
* **Offline.** Three files of our own, no package data, no CDN fallback to
  guard against; the server's ``Content-Security-Policy`` forbids any other
  origin, so an asset from the internet cannot creep in unnoticed.
* **Testable in headless Chromium.** The page is ordinary DOM and canvas,
  driven over the DevTools protocol in the tests (Dash's test fixtures pin
  Selenium ≤ 4.2 and need chromedriver; Panel's content arrives over a
  websocket that virtual-time screenshots do not wait for), and every view
  is also a plain JSON answer a test can read.

What it costs: the pan/zoom/refetch glue and the canvas drawing are ours
(``static/viewer.js``, plain JavaScript, no build step).
"""

from __future__ import annotations

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
