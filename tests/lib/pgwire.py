"""Raw PostgreSQL v3 wire protocol client for integration tests (Python 3.11 stdlib).

Made for poking at splitpoint byte by byte: every message can be built and sent on its
own, every reply comes back as a (type, body) tuple, and nothing is hidden.
Protocol reference: https://www.postgresql.org/docs/15/protocol-message-formats.html

    import pgwire
    with pgwire.connect("127.0.0.1", port, "app", "app", password="secret") as c:
        r = c.query("SELECT 1 AS one; SELECT 2")
        assert r.results[0].rows == [["1"]] and r.status == "I"
        r = c.extended("SELECT $1::int + 1", ["41"])
        assert r.rows == [["42"]]
        c.send(pgwire.query_msg("SELECT pg_sleep(10)"))
        c.cancel()
        err = c.query_collect().error      # {'S': 'ERROR', 'C': '57014', 'M': ...}

Raw use: c = pgwire.Connection.open(host, port); c.send(b"...") ; c.recv().
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import socket
import ssl
import struct
from dataclasses import dataclass, field
from typing import Iterable, Sequence

PROTOCOL_VERSION = 196608  # 3.0
SSL_REQUEST_CODE = 80877103
GSSENC_REQUEST_CODE = 80877104
CANCEL_REQUEST_CODE = 80877102
MAX_MESSAGE = 1 << 30

# Backend message types, for readability in tests.
AUTHENTICATION = "R"
BACKEND_KEY_DATA = "K"
BIND_COMPLETE = "2"
CLOSE_COMPLETE = "3"
COMMAND_COMPLETE = "C"
COPY_DATA = "d"
COPY_DONE = "c"
COPY_IN_RESPONSE = "G"
COPY_OUT_RESPONSE = "H"
COPY_BOTH_RESPONSE = "W"
DATA_ROW = "D"
EMPTY_QUERY_RESPONSE = "I"
ERROR_RESPONSE = "E"
NO_DATA = "n"
NOTICE_RESPONSE = "N"
NOTIFICATION_RESPONSE = "A"
PARAMETER_DESCRIPTION = "t"
PARAMETER_STATUS = "S"
PARSE_COMPLETE = "1"
PORTAL_SUSPENDED = "s"
READY_FOR_QUERY = "Z"
ROW_DESCRIPTION = "T"

# Authentication request codes.
AUTH_OK = 0
AUTH_CLEARTEXT = 3
AUTH_MD5 = 5
AUTH_SASL = 10
AUTH_SASL_CONTINUE = 11
AUTH_SASL_FINAL = 12


class ProtocolError(Exception):
    """The peer sent something this client did not expect."""


class ConnectionClosed(ProtocolError):
    """The peer closed the connection (EOF)."""


class PgError(Exception):
    """An ErrorResponse; `fields` maps field codes ('C', 'M', 'S', ...) to values."""

    def __init__(self, fields: dict[str, str]):
        self.fields = fields
        super().__init__(f"{fields.get('S', 'ERROR')} {fields.get('C', '?????')}: {fields.get('M', '')}")

    @property
    def sqlstate(self) -> str:
        return self.fields.get("C", "")

    @property
    def message(self) -> str:
        return self.fields.get("M", "")


# ------------------------------------------------------------------ encoding helpers

def cstr(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    if b"\0" in b:
        raise ValueError("NUL inside a C string")
    return b + b"\0"


def i16(n: int) -> bytes:
    return struct.pack("!h", n)


def i32(n: int) -> bytes:
    return struct.pack("!i", n)


def message(type_: str | bytes, body: bytes = b"") -> bytes:
    """A typed frontend message: type byte, Int32 length (including itself), body."""
    t = type_.encode() if isinstance(type_, str) else type_
    if len(t) != 1:
        raise ValueError("message type must be one byte")
    return t + i32(len(body) + 4) + body


def untyped(body: bytes) -> bytes:
    """An untyped message (startup phase): Int32 length, body."""
    return i32(len(body) + 4) + body


# ------------------------------------------------------------------ startup-phase messages

def startup_message(user: str, database: str | None = None, version: int = PROTOCOL_VERSION,
                    **params: str) -> bytes:
    pairs = {"user": user}
    if database is not None:
        pairs["database"] = database
    pairs.update(params)
    body = i32(version) + b"".join(cstr(k) + cstr(v) for k, v in pairs.items()) + b"\0"
    return untyped(body)


def ssl_request() -> bytes:
    return untyped(i32(SSL_REQUEST_CODE))


def gssenc_request() -> bytes:
    return untyped(i32(GSSENC_REQUEST_CODE))


def cancel_request(pid: int, secret: int) -> bytes:
    return untyped(i32(CANCEL_REQUEST_CODE) + i32(pid) + i32(secret))


def password_message(password: str | bytes) -> bytes:
    return message("p", cstr(password))


def sasl_initial_response(mechanism: str, data: bytes) -> bytes:
    return message("p", cstr(mechanism) + i32(len(data)) + data)


def sasl_response(data: bytes) -> bytes:
    return message("p", data)


# ------------------------------------------------------------------ frontend messages

def query_msg(sql: str) -> bytes:
    return message("Q", cstr(sql))


def parse_msg(sql: str, name: str = "", param_oids: Sequence[int] = ()) -> bytes:
    return message("P", cstr(name) + cstr(sql) + i16(len(param_oids)) +
                   b"".join(struct.pack("!I", o) for o in param_oids))


def _param_bytes(v: str | bytes | int | float | None) -> bytes:
    if v is None:
        return i32(-1)
    if isinstance(v, bool):
        v = "true" if v else "false"
    elif isinstance(v, (int, float)):
        v = str(v)
    b = v.encode() if isinstance(v, str) else bytes(v)
    return i32(len(b)) + b


def bind_msg(params: Sequence[str | bytes | int | None] = (), portal: str = "",
             statement: str = "", param_formats: Sequence[int] = (),
             result_formats: Sequence[int] = ()) -> bytes:
    """Bind; str/int params are sent as text, bytes as-is, None as NULL."""
    body = cstr(portal) + cstr(statement)
    body += i16(len(param_formats)) + b"".join(i16(f) for f in param_formats)
    body += i16(len(params)) + b"".join(_param_bytes(p) for p in params)
    body += i16(len(result_formats)) + b"".join(i16(f) for f in result_formats)
    return message("B", body)


def describe_msg(kind: str = "P", name: str = "") -> bytes:
    """kind 'S' (statement) or 'P' (portal)."""
    return message("D", kind.encode() + cstr(name))


def execute_msg(portal: str = "", max_rows: int = 0) -> bytes:
    return message("E", cstr(portal) + i32(max_rows))


def close_msg(kind: str = "S", name: str = "") -> bytes:
    return message("C", kind.encode() + cstr(name))


def sync_msg() -> bytes:
    return message("S")


def flush_msg() -> bytes:
    return message("H")


def terminate_msg() -> bytes:
    return message("X")


def copy_data_msg(data: bytes) -> bytes:
    return message("d", data)


def copy_done_msg() -> bytes:
    return message("c")


def copy_fail_msg(reason: str) -> bytes:
    return message("f", cstr(reason))


# ------------------------------------------------------------------ backend decoding

class Reader:
    """Bounded reader over one message body."""

    def __init__(self, body: bytes):
        self.b = body
        self.pos = 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.b):
            raise ProtocolError(f"message body too short: want {n} at {self.pos} of {len(self.b)}")
        out = self.b[self.pos:self.pos + n]
        self.pos += n
        return out

    def i16(self) -> int:
        return struct.unpack("!h", self._take(2))[0]

    def i32(self) -> int:
        return struct.unpack("!i", self._take(4))[0]

    def u32(self) -> int:
        return struct.unpack("!I", self._take(4))[0]

    def byte(self) -> bytes:
        return self._take(1)

    def cstr(self) -> str:
        end = self.b.find(b"\0", self.pos)
        if end < 0:
            raise ProtocolError("unterminated string")
        s = self.b[self.pos:end].decode("utf-8", "replace")
        self.pos = end + 1
        return s

    def rest(self) -> bytes:
        return self._take(len(self.b) - self.pos)

    def done(self) -> bool:
        return self.pos == len(self.b)


def decode_fields(body: bytes) -> dict[str, str]:
    """ErrorResponse / NoticeResponse body -> {field code: value}, e.g. {'C': '42601'}."""
    r = Reader(body)
    fields: dict[str, str] = {}
    while True:
        code = r.byte()
        if code == b"\0":
            return fields
        fields[code.decode()] = r.cstr()


decode_error = decode_fields
decode_notice = decode_fields


@dataclass
class Column:
    name: str
    table_oid: int
    column_attr: int
    type_oid: int
    type_size: int
    type_modifier: int
    format: int


def decode_row_description(body: bytes) -> list[Column]:
    r = Reader(body)
    return [Column(r.cstr(), r.u32(), r.i16(), r.u32(), r.i16(), r.i32(), r.i16())
            for _ in range(r.i16())]


def decode_data_row(body: bytes) -> list[bytes | None]:
    r = Reader(body)
    out: list[bytes | None] = []
    for _ in range(r.i16()):
        n = r.i32()
        out.append(None if n == -1 else r._take(n))
    return out


def decode_parameter_description(body: bytes) -> list[int]:
    r = Reader(body)
    return [r.u32() for _ in range(r.i16())]


def decode_authentication(body: bytes) -> tuple[int, bytes]:
    r = Reader(body)
    return r.i32(), r.rest()


def decode_backend_key_data(body: bytes) -> tuple[int, int]:
    r = Reader(body)
    return r.i32(), r.i32()


def decode_parameter_status(body: bytes) -> tuple[str, str]:
    r = Reader(body)
    return r.cstr(), r.cstr()


def decode_command_complete(body: bytes) -> str:
    return Reader(body).cstr()


# ------------------------------------------------------------------ auth

def md5_password(user: str, password: str, salt: bytes) -> str:
    inner = hashlib.md5((password + user).encode()).hexdigest()
    return "md5" + hashlib.md5(inner.encode() + salt).hexdigest()


class ScramClient:
    """SCRAM-SHA-256 client (RFC 5802/7677), by default without channel binding, as
    libpq with channel_binding=disable. The password is used as UTF-8 without SASLprep,
    which is exact for ASCII passwords. `gs2` and `cbind_data` make other clients: "y,,"
    (could bind, thinks the server cannot), or "p=tls-server-end-point,," with the
    server certificate's hash for SCRAM-SHA-256-PLUS (RFC 5929); c= is
    base64(gs2 + cbind_data)."""

    MECHANISM = "SCRAM-SHA-256"
    MECHANISM_PLUS = "SCRAM-SHA-256-PLUS"

    def __init__(self, password: str, nonce: str | None = None, gs2: str = "n,,", cbind_data: bytes = b""):
        self.password = password
        self.nonce = nonce or base64.b64encode(os.urandom(18)).decode()
        self.client_first_bare = f"n=,r={self.nonce}"
        self.server_signature: bytes | None = None
        self.gs2 = gs2
        self.cbind = base64.b64encode(gs2.encode() + cbind_data).decode()

    def client_first(self) -> bytes:
        return (self.gs2 + self.client_first_bare).encode()

    def client_final(self, server_first: bytes) -> bytes:
        sf = server_first.decode()
        attrs = dict(kv.split("=", 1) for kv in sf.split(","))
        nonce, salt, iters = attrs["r"], base64.b64decode(attrs["s"]), int(attrs["i"])
        if not nonce.startswith(self.nonce) or len(nonce) == len(self.nonce):
            raise ProtocolError("SCRAM server nonce does not extend the client nonce")
        salted = hashlib.pbkdf2_hmac("sha256", self.password.encode(), salt, iters)
        client_key = hmac.digest(salted, b"Client Key", "sha256")
        stored_key = hashlib.sha256(client_key).digest()
        without_proof = f"c={self.cbind},r={nonce}"
        auth_message = f"{self.client_first_bare},{sf},{without_proof}".encode()
        signature = hmac.digest(stored_key, auth_message, "sha256")
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        server_key = hmac.digest(salted, b"Server Key", "sha256")
        self.server_signature = hmac.digest(server_key, auth_message, "sha256")
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify_server_final(self, server_final: bytes) -> None:
        sf = server_final.decode()
        if sf.startswith("e="):
            raise ProtocolError(f"SCRAM server error: {sf[2:]}")
        if not sf.startswith("v=") or self.server_signature is None:
            raise ProtocolError(f"bad SCRAM server-final-message: {sf!r}")
        if not hmac.compare_digest(base64.b64decode(sf[2:]), self.server_signature):
            raise ProtocolError("SCRAM server signature mismatch")


# ------------------------------------------------------------------ results

@dataclass
class StatementResult:
    """One statement's outcome inside a query: columns, rows, command tag."""
    columns: list[Column] = field(default_factory=list)
    rows: list[list] = field(default_factory=list)
    tag: str | None = None
    copy_data: list[bytes] = field(default_factory=list)

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]


@dataclass
class QueryResult:
    """Everything between sending a query and ReadyForQuery."""
    results: list[StatementResult] = field(default_factory=list)
    error: dict[str, str] | None = None
    notices: list[dict[str, str]] = field(default_factory=list)
    status: str | None = None  # ReadyForQuery: 'I' idle, 'T' in transaction, 'E' failed
    messages: list[tuple[str, bytes]] = field(default_factory=list)

    @property
    def rows(self) -> list[list]:
        """Rows of the last statement that returned a row description."""
        for r in reversed(self.results):
            if r.columns:
                return r.rows
        return self.results[-1].rows if self.results else []

    @property
    def tag(self) -> str | None:
        return self.results[-1].tag if self.results else None

    @property
    def sqlstate(self) -> str | None:
        return self.error.get("C") if self.error else None

    def raise_error(self) -> "QueryResult":
        if self.error:
            raise PgError(self.error)
        return self


def _convert(values: list[bytes | None], columns: list[Column]) -> list:
    out = []
    for i, v in enumerate(values):
        text = v is not None and (i >= len(columns) or columns[i].format == 0)
        out.append(v.decode() if text else v)
    return out


# ------------------------------------------------------------------ connection

class Connection:
    def __init__(self, sock: socket.socket, timeout: float = 10.0):
        self.sock: socket.socket | ssl.SSLSocket = sock
        self.timeout = timeout
        self.buf = bytearray()
        self.parameters: dict[str, str] = {}
        self.pid: int | None = None
        self.secret: int | None = None
        self.status: str | None = None
        self.notices: list[dict[str, str]] = []
        self.host, self.port = sock.getpeername()[:2]

    # -- opening

    @classmethod
    def open(cls, host: str, port: int, timeout: float = 10.0) -> "Connection":
        """A bare TCP connection; nothing sent yet."""
        sock = socket.create_connection((host, port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(sock, timeout)

    def request_ssl(self, wrap: bool = True) -> str:
        """Sends SSLRequest; returns the answer byte ('S' or 'N'). On 'S' and wrap,
        switches to TLS without certificate verification."""
        self.send(ssl_request())
        answer = self._recv_exact(1).decode("latin-1")
        if answer == "S" and wrap:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            self.sock = ctx.wrap_socket(self.sock, server_hostname=str(self.host))
        return answer

    def startup(self, user: str, database: str | None = None, password: str | None = None,
                **params: str) -> "Connection":
        """Sends StartupMessage, answers the auth request (trust, cleartext, md5,
        SCRAM-SHA-256), reads until ReadyForQuery. Raises PgError on ErrorResponse."""
        self.send(startup_message(user, database, **params))
        scram: ScramClient | None = None
        while True:
            t, body = self.recv()
            if t == AUTHENTICATION:
                code, data = decode_authentication(body)
                if code == AUTH_OK:
                    continue
                if password is None:
                    raise ProtocolError(f"server asks for a password (auth code {code}) and none given")
                if code == AUTH_CLEARTEXT:
                    self.send(password_message(password))
                elif code == AUTH_MD5:
                    self.send(password_message(md5_password(user, password, data[:4])))
                elif code == AUTH_SASL:
                    mechanisms = [m for m in data.split(b"\0") if m]
                    if ScramClient.MECHANISM.encode() not in mechanisms:
                        raise ProtocolError(f"no supported SASL mechanism in {mechanisms}")
                    scram = ScramClient(password)
                    self.send(sasl_initial_response(ScramClient.MECHANISM, scram.client_first()))
                elif code == AUTH_SASL_CONTINUE and scram:
                    self.send(sasl_response(scram.client_final(data)))
                elif code == AUTH_SASL_FINAL and scram:
                    scram.verify_server_final(data)
                else:
                    raise ProtocolError(f"unsupported authentication request {code}")
            elif t == ERROR_RESPONSE:
                raise PgError(decode_fields(body))
            elif t == NOTICE_RESPONSE:
                self.notices.append(decode_fields(body))
            elif t == PARAMETER_STATUS:
                k, v = decode_parameter_status(body)
                self.parameters[k] = v
            elif t == BACKEND_KEY_DATA:
                self.pid, self.secret = decode_backend_key_data(body)
            elif t == READY_FOR_QUERY:
                self.status = body.decode()
                return self
            else:
                raise ProtocolError(f"unexpected message {t!r} during startup")

    # -- raw I/O

    def send(self, data: bytes | Iterable[bytes]) -> None:
        if not isinstance(data, (bytes, bytearray)):
            data = b"".join(data)
        self.sock.sendall(data)

    def _fill(self, timeout: float | None) -> None:
        self.sock.settimeout(self.timeout if timeout is None else timeout)
        chunk = self.sock.recv(65536)  # raises TimeoutError on timeout
        if not chunk:
            raise ConnectionClosed("connection closed by server")
        self.buf += chunk

    def _recv_exact(self, n: int, timeout: float | None = None) -> bytes:
        while len(self.buf) < n:
            self._fill(timeout)
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def recv(self, timeout: float | None = None) -> tuple[str, bytes]:
        """Next backend message as (type char, body). Raises TimeoutError when nothing
        complete arrives within timeout (default: the connection's), ConnectionClosed
        on EOF."""
        while True:
            if len(self.buf) >= 5:
                (length,) = struct.unpack("!i", self.buf[1:5])
                if length < 4 or length > MAX_MESSAGE:
                    raise ProtocolError(f"bad message length {length}")
                if len(self.buf) >= 1 + length:
                    t = chr(self.buf[0])
                    body = bytes(self.buf[5:1 + length])
                    del self.buf[:1 + length]
                    return t, body
            self._fill(timeout)

    def recv_raw(self, timeout: float = 2.0) -> bytes:
        """Every byte that arrives (buffered ones first) until the peer closes or
        nothing more comes within timeout. For replies that are not v3 messages,
        e.g. a protocol-2 style error ('E' + text, no length) or an SSLRequest answer."""
        out = bytes(self.buf)
        self.buf.clear()
        self.sock.settimeout(timeout)
        while True:
            try:
                chunk = self.sock.recv(65536)
            except (TimeoutError, ConnectionResetError):
                return out
            if not chunk:
                return out
            out += chunk

    def recv_until(self, *types: str, timeout: float | None = None) -> list[tuple[str, bytes]]:
        """Messages up to and including the first of one of `types`."""
        out = []
        while True:
            m = self.recv(timeout)
            out.append(m)
            if m[0] in types:
                return out

    def expect(self, type_: str, timeout: float | None = None) -> bytes:
        """Next message must be `type_` (NoticeResponses are collected and skipped);
        an ErrorResponse raises PgError."""
        while True:
            t, body = self.recv(timeout)
            if t == type_:
                return body
            if t == NOTICE_RESPONSE:
                self.notices.append(decode_fields(body))
                continue
            if t == ERROR_RESPONSE:
                raise PgError(decode_fields(body))
            raise ProtocolError(f"expected {type_!r}, got {t!r}: {body[:100]!r}")

    def is_closed(self, timeout: float = 2.0) -> bool:
        """True when the server closes the connection within timeout (any pending
        messages are read and discarded)."""
        try:
            while True:
                self.recv(timeout)
        except ConnectionClosed:
            return True
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

    # -- queries

    def query_collect(self, copy_in: bytes | None = None,
                      timeout: float | None = None) -> QueryResult:
        """Reads the answer to a query (simple or extended through Sync) until
        ReadyForQuery. On CopyInResponse sends copy_in and CopyDone (CopyFail if
        copy_in is None). Text columns are str, binary ones bytes, NULL None."""
        res = QueryResult()
        cur: StatementResult | None = None
        while True:
            t, body = self.recv(timeout)
            res.messages.append((t, body))
            if cur is None and t in (ROW_DESCRIPTION, DATA_ROW, COMMAND_COMPLETE,
                                     EMPTY_QUERY_RESPONSE, COPY_OUT_RESPONSE, COPY_IN_RESPONSE):
                cur = StatementResult()
                res.results.append(cur)
            if t == ROW_DESCRIPTION:
                assert cur is not None
                cur.columns = decode_row_description(body)
            elif t == DATA_ROW:
                assert cur is not None
                cur.rows.append(_convert(decode_data_row(body), cur.columns))
            elif t in (COMMAND_COMPLETE, EMPTY_QUERY_RESPONSE):
                assert cur is not None
                cur.tag = decode_command_complete(body) if t == COMMAND_COMPLETE else ""
                cur = None
            elif t == COPY_DATA:
                assert cur is not None
                cur.copy_data.append(body)
            elif t == COPY_IN_RESPONSE:
                if copy_in is None:
                    self.send(copy_fail_msg("no COPY data given"))
                else:
                    self.send([copy_data_msg(copy_in), copy_done_msg()])
            elif t == ERROR_RESPONSE:
                res.error = decode_fields(body)
                cur = None
            elif t == NOTICE_RESPONSE:
                res.notices.append(decode_fields(body))
            elif t == PARAMETER_STATUS:
                k, v = decode_parameter_status(body)
                self.parameters[k] = v
            elif t == READY_FOR_QUERY:
                res.status = self.status = body.decode()
                return res
            # ParseComplete, BindComplete, NoData, ParameterDescription, CopyDone,
            # CopyOutResponse, PortalSuspended, CloseComplete, NotificationResponse:
            # kept in res.messages only.

    def query(self, sql: str, copy_in: bytes | None = None,
              timeout: float | None = None) -> QueryResult:
        """Simple Query; does not raise on ErrorResponse (see .error / .raise_error())."""
        self.send(query_msg(sql))
        return self.query_collect(copy_in, timeout)

    def extended(self, sql: str, params: Sequence = (), statement: str = "",
                 result_formats: Sequence[int] = (), param_formats: Sequence[int] = (),
                 param_oids: Sequence[int] = (), max_rows: int = 0,
                 timeout: float | None = None) -> QueryResult:
        """Parse/Bind/Describe(portal)/Execute/Sync in one write."""
        self.send([parse_msg(sql, statement, param_oids),
                   bind_msg(params, "", statement, param_formats, result_formats),
                   describe_msg("P"), execute_msg("", max_rows), sync_msg()])
        return self.query_collect(timeout=timeout)

    def scalar(self, sql: str):
        """First column of the first row of a simple query; raises PgError on error."""
        return self.query(sql).raise_error().rows[0][0]

    def cancel(self, host: str | None = None, port: int | None = None) -> None:
        """Sends a CancelRequest for this session on a new connection."""
        if self.pid is None or self.secret is None:
            raise ProtocolError("no BackendKeyData received")
        with socket.create_connection((host or self.host, port or self.port),
                                      timeout=self.timeout) as s:
            s.sendall(cancel_request(self.pid, self.secret))
            try:
                s.recv(1)  # the server closes without answering
            except OSError:
                pass

    def close(self) -> None:
        try:
            self.sock.sendall(terminate_msg())
        except OSError:
            pass
        self.sock.close()

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def connect(host: str, port: int, user: str, database: str | None = None,
            password: str | None = None, timeout: float = 10.0, tls: bool = False,
            **params: str) -> Connection:
    """Opens, optionally negotiates TLS (SSLRequest; fails if refused), and starts up."""
    c = Connection.open(host, port, timeout)
    try:
        if tls and c.request_ssl() != "S":
            raise ProtocolError("server refused SSL")
        return c.startup(user, database, password, **params)
    except BaseException:
        c.sock.close()
        raise
