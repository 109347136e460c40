"""Fixtures of the command-line, page and report tests."""

import threading

import pytest


@pytest.fixture(scope="module")
def server():
    """``txcalc serve``'s server on 127.0.0.1 and a free port, in a thread of this process;
    shut down and closed after the module's tests."""
    from txcalc.web.server import make_server
    srv = make_server("127.0.0.1", 0)
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    t.join(5)
