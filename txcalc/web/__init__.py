"""``txcalc serve``: a local what-if page over the commands' own JSON answers (txcalc.answers,
computed in the server's process).

Why the standard library's ``http.server`` and not Starlette, Flask or bottle: the page needs
five GET routes and one upload, all JSON or static files, for one user on 127.0.0.1. The
standard library does that in one module with no dependency to install, pin or audit, so
``txcalc serve`` works in every install of the calculator (no ``[web]`` extra that a user
must know about), starts in milliseconds, and cannot drift from the calculator's Python. What
a framework would add (routing tables, async, templates, sessions) the page does not use.

    calc.py     the page's controls -> the CLI commands they stand for -> their answers
                (the answer functions, called in-process: the --json text, byte for byte)
    charts.py   the page's charts: each point the answer of a panel's command with one option
                changed (memory against sequence, KV against context, latency against load,
                the training frontier); the browser draws them as SVG
    server.py   the HTTP server (routes, errors as one line with HTTP 400, loopback checks)
    static/     the page: index.html, app.js (vanilla JS, no network), app.css
"""
