#!/usr/bin/env python3
# A WebSocket echo server for the ngx driver specs (spec/02-integration/04-lua/ngx_drivers_spec.lua):
# listens on 127.0.0.1, on the port given as its argument (0 or none: a free one; printed as
# "PORT n" once listening), over TLS with --tls CERT KEY (wss://), checks the client's handshake (RFC 6455:
# GET, Upgrade: websocket, Sec-WebSocket-Version: 13, a key), answers it with the accept hash,
# then echoes every text and binary frame (unmasked from the client's mask), answers a ping with a
# pong carrying its payload and a close with a close. A request that is not a WebSocket handshake
# gets "400 Bad Request". One thread per connection; runs until killed.
import base64
import hashlib
import socket
import ssl
import struct
import sys
import threading

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def recv_exact(conn, n):
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def send_frame(conn, opcode, payload):
    head = bytes([0x80 | opcode])
    n = len(payload)
    if n < 126:
        head += bytes([n])
    elif n < 65536:
        head += bytes([126]) + struct.pack("!H", n)
    else:
        head += bytes([127]) + struct.pack("!Q", n)
    conn.sendall(head + payload)


def handshake(conn):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            return False
        data += chunk
        if len(data) > 65536:
            return False
    lines = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    key = headers.get("sec-websocket-key")
    if (not lines[0].startswith("GET ") or headers.get("upgrade", "").lower() != "websocket"
            or headers.get("sec-websocket-version") != "13" or not key):
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        return False
    accept = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
    conn.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                  "Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + "\r\n\r\n").encode())
    return True


def serve(conn):
    try:
        if not handshake(conn):
            return
        while True:
            b0, b1 = recv_exact(conn, 2)
            opcode = b0 & 0x0F
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", recv_exact(conn, 2))[0]
            elif n == 127:
                n = struct.unpack("!Q", recv_exact(conn, 8))[0]
            mask = recv_exact(conn, 4) if b1 & 0x80 else None
            payload = recv_exact(conn, n)
            if mask:
                payload = bytes(c ^ mask[i % 4] for i, c in enumerate(payload))
            if opcode in (0x1, 0x2):
                send_frame(conn, opcode, payload)
            elif opcode == 0x9:
                send_frame(conn, 0xA, payload)
            elif opcode == 0x8:
                send_frame(conn, 0x8, payload)
                return
    except (EOFError, OSError):
        pass
    finally:
        conn.close()


def tls_serve(tls, conn):
    try:
        conn = tls.wrap_socket(conn, server_side=True)
    except (ssl.SSLError, OSError):
        conn.close()
        return
    serve(conn)


def main():
    args = sys.argv[1:]
    tls = None
    if "--tls" in args:
        i = args.index("--tls")
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(args[i + 1], args[i + 2])
        del args[i:i + 3]
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", int(args[0]) if args else 0))
    srv.listen(64)
    print("PORT %d" % srv.getsockname()[1], flush=True)
    while True:
        conn, _ = srv.accept()
        if tls:
            threading.Thread(target=tls_serve, args=(tls, conn), daemon=True).start()
        else:
            threading.Thread(target=serve, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
