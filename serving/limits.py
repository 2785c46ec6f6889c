"""Every limit the server holds a client to, in one place (the model's own are in serving.model, a request's
contents in serving.requests). Memory is bounded by construction: at most MAX_CONNECTIONS connections, each
holding one READ_BYTES read while its headers are awaited and nothing more until admitted; at most
MAX_IN_FLIGHT requests and BODY_BUDGET_BYTES of bodies admitted at once; at most MAX_QUEUE waiting."""

MAX_CONNECTIONS = 2000  # open connections; fewer where the file-descriptor limit is lower (serving.cli)
HEADER_TIMEOUT_S = 10.0  # first byte of a request (or the connection) -> its last header line
IDLE_TIMEOUT_S = 30  # a keep-alive connection idle this long between two requests is closed
MAX_HEADERS = 100  # header lines in one request (http.client's own limit); 431 beyond
MAX_HEADER_BYTES = 64 * 1024  # request line and headers of one request; 431 beyond
READ_BYTES = 16 * 1024  # one read of a connection while its headers are awaited
BODY_READ_BYTES = 256 * 1024  # one read of an admitted body (asyncio's own default)
LINGER_S = 2.0  # after a refusal, how long what the client still sends is drained before closing

MAX_IN_FLIGHT = 256  # requests admitted at once: their bodies read, parsed, queued for or in a batch
# Body bytes admitted at once: about 21 bodies of Vertex AI's 1.5 MB limit, so that a burst of large bodies
# holds at most this much (a few times over while each is parsed), not one copy per connection.
BODY_BUDGET_BYTES = 32_000_000
MAX_QUEUE = 512  # requests waiting for admission; 429 beyond
QUEUE_TIMEOUT_S = 10.0  # how long a request waits for admission before 429
BODY_TIMEOUT_S = 10.0  # from admission to the body's last byte, however fast it comes
# An admitted body must keep coming at MIN_BODY_RATE bytes/s after its first BODY_GRACE_S: it holds its
# declared size of BODY_BUDGET_BYTES from admission, so ~22 connections declaring 1.5 MB and sending nothing
# held the whole budget for BODY_TIMEOUT_S, and every request behind them waited.
MIN_BODY_RATE = 50_000
BODY_GRACE_S = 1.0
# How long a response's write may stall (the client reads nothing, so the socket's buffers stay full) before
# the connection is aborted: a reader that never reads held its connection, and the response, for ever.
SEND_TIMEOUT_S = 10.0
RETRY_AFTER_S = 1  # what a 429/503 tells the client
STOP_GRACE_S = 20  # after SIGTERM, how long requests in flight may take to finish
# After SIGTERM, how long an idle keep-alive connection may still deliver a request already on its way (it
# is answered with Connection: close) before it is closed: closing at once failed requests that had crossed
# the signal on the wire.
LAST_CALL_S = 0.5
