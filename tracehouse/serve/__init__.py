"""``tracehouse serve``: an interactive, offline, read-only viewer over the marts.

Layers: this package sits above :mod:`tracehouse.reports` (whose headline
gatherer and formatters it calls, so the viewer and the report print the
same numbers) and :mod:`tracehouse.query` (whose file rules its read-only
connection applies), below the CLI. Modules: :mod:`.marts` (read-only
cursors, reopened after a build publishes), :mod:`.params` and
:mod:`.cells` (what comes in and goes out), one module per view
(:mod:`.overview`, :mod:`.heatmap`, :mod:`.drill`, :mod:`.kernels`,
:mod:`.timeline`, :mod:`.pipeline`, :mod:`.annotations`,
:mod:`.stragglers`, :mod:`.compare`), :mod:`.exports` (CSV, Parquet, Perfetto), :mod:`.api`
(the route table) and :mod:`.server` (HTTP); the page is ``static/`` (one
HTML file, one script, one style sheet).

Why a page of our own over a JSON API, served by the standard library,
rather than Dash/Plotly or Panel/Bokeh (all three were run offline here;
research/efficiency_whatif_viewer.md §5), measured against the issue's goals:

* **Starts in seconds.** Python's ``http.server`` adds nothing to import;
  ``tracehouse serve`` listens 0.9-1.4 s after its process starts on this
  2-core machine (2.8 s under a load of 7), most of it imports (DuckDB,
  Jinja2, and matplotlib for the report's palettes), and the first view's
  four requests take 120-250 ms more (``benchmarks/serve.py``). Dash
  would add Flask, Plotly and its component suites, Panel Bokeh and Tornado
  (dash + plotly alone install ~100 MB, research §5.1); their start-up was
  not measured here.
* **< 200 ms per interaction at 1,024 ranks × 4 iterations.** What costs
  time is the query, and every view is one or a few bound queries whose
  answer is already the size of the screen: the timeline's level of detail
  is computed in SQL per pixel bucket (as Perfetto's mipmap does), so an
  answer never grows with the number of kernels, and a selection of up to
  64 ranks is read once into the viewer's own memory for its pans and
  zooms. Measured (``benchmarks/serve.py``, benchmarks/README.md, load
  5.5 on 2 cores): drill-in 14-94 ms, a PP group's pans and zooms 43-77 ms,
  a replica's 55-247 ms (median); not met: a selection's first timeline
  view (0.4-1 s) and all 1,024 ranks on one timeline (0.7-3.2 s), because
  ``fct_kernels`` is not ordered by rank. A callback framework would add its own round on top (Dash
  serialises whole figures: 7.6 MB per 100,000 rectangles with Plotly,
  research §5.5); Bokeh keeps a websocket session per page.
* **Offline.** Three files of our own, no third-party asset and so no CDN
  fallback to guard against; the server's ``Content-Security-Policy`` forbids any other
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
