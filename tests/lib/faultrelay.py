"""A fault-injecting TCP relay for the integration tests (issue #17): listens on a free
port and forwards every connection to a target (a shard), with faults switched on and
off at run time by the test. Threads and the standard library only.

    relay = FaultRelay(pg_port).start()     # the shard's config points at relay.port
    relay.latency = 0.02                    # added to each chunk, each direction
    relay.bandwidth = 1_000_000             # bytes per second per direction per connection
    relay.reset_after(200_000)              # RST the next connection whose shard->proxy
                                            # bytes pass 200 kB (one shot)
    relay.reset_all()                       # RST every open connection now
    relay.blackhole = True                  # stop forwarding (new connections too); the
                                            # sockets stay open: no FIN, no RST
    relay.connect_delay = 3.0               # each new connection waits 3 s before the relay
                                            # opens its upstream (a shard slow to accept);
                                            # open connections are not touched
    relay.half_close("to_proxy")            # FIN to the proxy on every open connection,
                                            # the shard side kept open ("to_shard": the reverse)
    ev = relay.hold_on(b"COMMIT PREPARED")  # hold the first proxy->shard chunk containing
    ev.wait(10); relay.release("drop")      # it; then "forward", "drop" or "reset"
    relay.clear(); relay.close()

Faults act on whole chunks as read (up to 64 kB), which is what a test needs: a reset
arrives mid-stream, a blackhole stalls both directions at once. A reset sets SO_LINGER 0
on both sockets before closing them, so each peer gets an RST, not a FIN.
"""

import select
import socket
import struct
import threading
import time

import sptest

CHUNK = 65536
TICK = 0.02  # how often a waiting pump looks at the fault settings


class _Conn:
    def __init__(self, relay, proxy_side, shard_side):
        self.relay = relay
        self.proxy_side = proxy_side
        self.shard_side = shard_side
        self.dead = False   # stop both pumps; the last one out closes the sockets
        self.rst = False    # close with SO_LINGER 0
        self.s2c_bytes = 0  # shard -> proxy bytes since the relay's reset_after() was armed
        self.stopped = set()  # directions closed by half_close: "to_proxy", "to_shard"
        self.running = 2
        self.lock = threading.Lock()

    def kill(self, rst=True):
        self.rst = self.rst or rst
        self.dead = True

    def pump_done(self):
        with self.lock:
            self.running -= 1
            last = self.running == 0
        if not last:
            return
        for s in (self.proxy_side, self.shard_side):
            try:
                if self.rst:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.close()
            except OSError:
                pass
        self.relay._forget(self)


class FaultRelay:
    def __init__(self, target_port, target_host=sptest.HOST, name="relay"):
        self.name = name
        self.target = (target_host, target_port)
        self.port = sptest.free_port()
        self.latency = 0.0      # seconds added to every chunk
        self.bandwidth = 0      # bytes/s per direction per connection; 0 = unlimited
        self.blackhole = False
        self.connect_delay = 0.0  # seconds a new connection waits before it is forwarded
        self.accepted = 0       # connections accepted so far
        self.resets = 0         # connections reset (reset_after, reset_all, release("reset"))
        self._conns = []
        self._lock = threading.Lock()
        self._reset_after = None
        self.reset_event = threading.Event()
        self._hold = None       # pattern to hold, proxy -> shard
        self._held = None       # the _Conn holding data
        self._held_event = threading.Event()
        self._release = None    # "forward" | "drop" | "reset"
        self._closed = False
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((sptest.HOST, self.port))
        self._sock.listen(512)

    # ------------------------------------------------------------ control

    def start(self):
        threading.Thread(target=self._accept_loop, name=f"{self.name}-accept", daemon=True).start()
        return self

    def connections(self):
        with self._lock:
            return len(self._conns)

    def reset_after(self, nbytes):
        """One shot: the first connection whose shard->proxy bytes, counted from now, pass
        `nbytes` is reset (both sides get an RST); reset_event is set then."""
        with self._lock:
            for c in self._conns:
                c.s2c_bytes = 0
            self.reset_event.clear()
            self._reset_after = nbytes

    def reset_all(self):
        """RST every open connection now. Returns how many."""
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            c.kill(rst=True)
        self.resets += len(conns)
        return len(conns)

    def half_close(self, direction="to_proxy"):
        """On every open connection, stop forwarding one direction and send a FIN that way
        ("to_proxy": the proxy reads EOF while the shard's backend stays connected;
        "to_shard": the backend reads EOF, the proxy's side stays open)."""
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            c.stopped.add(direction)
            try:
                (c.proxy_side if direction == "to_proxy" else c.shard_side).shutdown(socket.SHUT_WR)
            except OSError:
                pass
        return len(conns)

    def hold_on(self, pattern):
        """Holds the first proxy->shard chunk that contains `pattern` (bytes) instead of
        forwarding it; the returned event is set when that happened. release() decides."""
        with self._lock:
            self._held_event.clear()
            self._release = None
            self._hold = pattern
        return self._held_event

    def release(self, action="forward"):
        """What happens to the held chunk: forwarded, dropped (the connection goes on as if
        it was never sent) or the connection reset."""
        with self._lock:
            self._hold = None
            self._release = action

    def clear(self):
        """Every fault off (a held chunk is forwarded)."""
        self.latency = 0.0
        self.bandwidth = 0
        self.blackhole = False
        self.connect_delay = 0.0
        with self._lock:
            self._reset_after = None
        if self._held_event.is_set() and self._release is None:
            self.release("forward")

    def close(self):
        self._closed = True
        self.clear()
        try:
            self._sock.close()
        except OSError:
            pass
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            c.kill(rst=False)

    # ------------------------------------------------------------ machinery

    def _forget(self, conn):
        with self._lock:
            if conn in self._conns:
                self._conns.remove(conn)

    def _accept_loop(self):
        self._sock.settimeout(0.2)
        while not self._closed:
            try:
                client, _ = self._sock.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            threading.Thread(target=self._open, args=(client,), daemon=True).start()

    def _open(self, client):
        # A blackhole takes new connections too: accepted (as the kernel does anyway),
        # then nothing is forwarded, not even the upstream connection is opened.
        while self.blackhole and not self._closed:
            time.sleep(TICK)
        if self.connect_delay:
            time.sleep(self.connect_delay)
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()
            return
        for s in (client, upstream):
            s.setblocking(False)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Conn(self, client, upstream)
        with self._lock:
            self._conns.append(conn)
            self.accepted += 1
        threading.Thread(target=self._pump, args=(conn, client, upstream, "to_shard"), daemon=True).start()
        threading.Thread(target=self._pump, args=(conn, upstream, client, "to_proxy"), daemon=True).start()

    def _wait(self, conn, direction, seconds):
        """Sleeps `seconds` unless the connection dies; False if it did."""
        end = time.monotonic() + seconds
        while not conn.dead and direction not in conn.stopped:
            left = end - time.monotonic()
            if left <= 0:
                return True
            time.sleep(min(left, TICK))
        return False

    def _pump(self, conn, src, dst, direction):
        try:
            while not conn.dead and direction not in conn.stopped:
                if self.blackhole:
                    time.sleep(TICK)
                    continue
                r, _, _ = select.select([src], [], [], TICK)
                if not r or conn.dead or self.blackhole:
                    continue
                try:
                    data = src.recv(CHUNK)
                except BlockingIOError:
                    continue
                except OSError:
                    conn.kill(rst=True)  # reset by the peer: pass it on
                    break
                if not data:  # EOF: pass the FIN on, keep the other direction
                    try:
                        dst.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    break
                t_in = time.monotonic()
                if direction == "to_shard" and not self._held_chunk(conn, data):
                    continue
                if self.latency and not self._wait(conn, direction, self.latency - (time.monotonic() - t_in)):
                    break
                if not self._send(conn, dst, data, direction):
                    break
                if direction == "to_proxy":
                    self._count(conn, len(data))
        finally:
            conn.pump_done()

    def _held_chunk(self, conn, data):
        """False when `data` is held and then dropped (or the connection reset)."""
        with self._lock:
            hold = self._hold is not None and self._hold in data and self._held is None
            if hold:
                self._held = conn
                self._hold = None
        if not hold:
            return True
        self._held_event.set()
        while self._release is None and not conn.dead and not self._closed:
            time.sleep(TICK)
        action = self._release or "forward"
        with self._lock:
            self._held = None
        if action == "reset":
            conn.kill(rst=True)
            self.resets += 1
            return False
        return action == "forward" and not conn.dead

    def _count(self, conn, n):
        with self._lock:
            if self._reset_after is None:
                return
            conn.s2c_bytes += n
            if conn.s2c_bytes < self._reset_after:
                return
            self._reset_after = None
        conn.kill(rst=True)
        self.resets += 1
        self.reset_event.set()

    def _send(self, conn, dst, data, direction):
        view = memoryview(data)
        while view:
            if conn.dead or direction in conn.stopped:
                return False
            if self.blackhole:
                time.sleep(TICK)
                continue
            n = len(view)
            if self.bandwidth:
                n = max(1, min(n, self.bandwidth // 50))  # 20 ms worth at a time
            _, w, _ = select.select([], [dst], [], TICK)
            if not w:
                continue
            try:
                sent = dst.send(view[:n])
            except BlockingIOError:
                continue
            except OSError:
                conn.kill(rst=True)
                return False
            view = view[sent:]
            if self.bandwidth and not self._wait(conn, direction, sent / self.bandwidth):
                return False
        return True
