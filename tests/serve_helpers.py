"""A ``proas serve`` policy server running in a test: shared by the serve tests."""

import threading

from proas.baselines.serve import ServeLimits, make_server


class Started:
    """``server`` behind HTTP on a free loopback port, with non-default ``limits``; stopped on exit."""

    def __init__(self, server, **limits):
        self.httpd = make_server(server, "127.0.0.1", 0, ServeLimits(**limits))
        self.port = self.httpd.server_address[1]
        self.queue = self.httpd.app.state.queue

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
