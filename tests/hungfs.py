"""A FUSE file system of one file whose reads can hang: what a hung network mount does to a reader.

Pure Python on the kernel's FUSE protocol (/dev/fuse, mounted with mount(2) through ctypes): no
libfuse, no package. The file holds a copy of a real media file; ``hang(start, end)`` makes every
read that touches those bytes get no answer: the reader waits in the kernel, in the state an NFS
read waits in when its server is gone (not even SIGKILL ends it, ``request_wait_answer``).

The server runs in a process of its own (``python tests/hungfs.py MOUNTPOINT NAME SOURCE``, driven
by ``HungMount``): a reader hung in the test's own process would otherwise keep the server's
/dev/fuse open, and nothing could end the wait. ``close`` kills the server, which aborts the
connection (the hung reads fail with ENOTCONN, a killed reader exits), and unmounts. Needs root and
/dev/fuse: ``unavailable()`` says why not, for a skip.

    with HungMount(tmp_path / "mnt", "talk.flac", source) as mount:
        mount.hang(0, size)             # every read hangs from now on
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import stat
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import Optional

# linux/fuse.h
LOOKUP, FORGET, GETATTR, OPEN, READ, RELEASE, FLUSH, INIT, INTERRUPT, DESTROY, BATCH_FORGET = (
    1, 2, 3, 14, 15, 18, 25, 26, 36, 38, 42)
NO_REPLY = (FORGET, BATCH_FORGET, INTERRUPT)
IN_HEADER = struct.Struct("<IIQQIIIHH")  # len, opcode, unique, nodeid, uid, gid, pid, extlen, pad
OUT_HEADER = struct.Struct("<IiQ")  # len, error, unique
ATTR = struct.Struct("<QQQQQQIIIIIIIIII")  # ino size blocks a/m/ctime, nsecs, mode nlink uid gid rdev blksize flags
READ_IN = struct.Struct("<QQI")  # fh, offset, size (the rest unused)
FOPEN_DIRECT_IO = 1  # every read() reaches us: no page cache between the reader and the hang
ROOT, FILE = 1, 2
MS_NOSUID, MS_NODEV, MNT_DETACH = 2, 4, 2


class HungFS:
    def __init__(self, mountpoint: Path, name: str, data: bytes):
        self.mountpoint, self.name, self.data = Path(mountpoint), name, data
        self.path = self.mountpoint / name
        self.hang: Optional[tuple[int, int]] = None  # [start, end) bytes whose reads get no answer
        self.fd = -1

    def mount(self) -> None:
        self.fd = os.open("/dev/fuse", os.O_RDWR)
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        options = f"fd={self.fd},rootmode=40000,user_id=0,group_id=0".encode()
        if libc.mount(b"hungfs", os.fsencode(self.mountpoint), b"fuse", MS_NOSUID | MS_NODEV, options) != 0:
            os.close(self.fd)
            raise OSError(ctypes.get_errno(), f"mount fuse on {self.mountpoint}: {os.strerror(ctypes.get_errno())}")
        threading.Thread(target=self._serve, daemon=True).start()

    # --- the protocol ---------------------------------------------------------------------

    def _serve(self) -> None:
        fd = self.fd
        while True:
            try:
                request = os.read(fd, 1 << 20)  # more than max_write + the headers
            except OSError as e:
                if e.errno in (errno.EINTR, errno.ENOENT):  # ENOENT: a request interrupted meanwhile
                    continue
                return  # ENODEV: unmounted; EBADF: closed
            size, opcode, unique, node, *_ = IN_HEADER.unpack_from(request)
            body = request[IN_HEADER.size:size]
            if opcode in NO_REPLY:
                continue
            try:
                answer = self._answer(opcode, node, body)
            except OSError as e:
                self._reply(unique, -e.errno)
                continue
            if answer is not None:
                self._reply(unique, 0, answer)
            if opcode == DESTROY:
                return

    def _reply(self, unique: int, error: int, payload: bytes = b"") -> None:
        with contextlib.suppress(OSError):  # the kernel dropped the request: its reader was killed
            os.write(self.fd, OUT_HEADER.pack(OUT_HEADER.size + len(payload), error, unique) + payload)

    def _answer(self, opcode: int, node: int, body: bytes) -> Optional[bytes]:
        if opcode == INIT:
            major, minor, readahead, _flags = struct.unpack_from("<IIII", body)
            # major, minor, max_readahead, flags, max_background, congestion, max_write, time_gran,
            # max_pages, map_alignment, flags2, unused[7]: 64 bytes
            return struct.pack("<IIIIHHIIHHI7I", 7, 31, readahead, 0, 16, 12, 1 << 17, 1, 32, 0, 0, *[0] * 7)
        if opcode == LOOKUP:
            if node != ROOT or body.rstrip(b"\0") != os.fsencode(self.name):
                raise OSError(errno.ENOENT, "")
            return struct.pack("<QQQQII", FILE, 0, 60, 60, 0, 0) + self._attr(FILE)
        if opcode == GETATTR:
            return struct.pack("<QII", 60, 0, 0) + self._attr(node)
        if opcode == OPEN:
            return struct.pack("<QIi", 0, FOPEN_DIRECT_IO, 0)
        if opcode == READ:
            _fh, offset, size = READ_IN.unpack_from(body)
            if self.hang and offset < self.hang[1] and offset + size > self.hang[0]:
                say(f"hung {offset}")  # tells HungMount
                return None  # no answer, ever
            return self.data[offset:offset + size]
        if opcode in (FLUSH, RELEASE, DESTROY):
            return b""
        raise OSError(errno.ENOSYS, "")

    def _attr(self, node: int) -> bytes:
        if node == ROOT:
            mode, size, nlink = stat.S_IFDIR | 0o755, 0, 2
        elif node == FILE:
            mode, size, nlink = stat.S_IFREG | 0o644, len(self.data), 1
        else:
            raise OSError(errno.ENOENT, "")
        return ATTR.pack(node, size, (size + 511) // 512, 0, 0, 0, 0, 0, 0, mode, nlink, 0, 0, 0, 4096, 0)



def unavailable() -> Optional[str]:
    """Why no FUSE file system can be mounted here (None: one can)."""
    if os.geteuid() != 0:
        return "mounting a FUSE file system needs root"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse on this machine"
    return None


class HungMount:
    """The test's side: starts the server process, tells it which bytes hang, ends it."""

    def __init__(self, mountpoint: Path, name: str, source: Path):
        self.mountpoint = Path(mountpoint)
        self.path = self.mountpoint / name
        self.size = Path(source).stat().st_size
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([sys.executable, __file__, str(mountpoint), name, str(source)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.mounted, self.acked, self.hung = threading.Event(), threading.Event(), threading.Event()
        threading.Thread(target=self._listen, daemon=True).start()

    def _listen(self) -> None:
        for line in self.proc.stdout:
            {"mounted": self.mounted, "ok": self.acked, "hung": self.hung}[line.split()[0]].set()
        self.mounted.set()  # the server is gone: __enter__ need not wait

    def __enter__(self) -> "HungMount":
        if not self.mounted.wait(30) or self.proc.poll() is not None:
            self.close()
            raise OSError(f"the FUSE server did not mount {self.mountpoint} (exit status {self.proc.poll()})")
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def hang(self, start: int, end: int) -> None:
        """Reads that touch bytes [start, end) get no answer from now on."""
        self.acked.clear()
        self.proc.stdin.write(f"{start} {end}\n")
        self.proc.stdin.flush()
        assert self.acked.wait(10), "the FUSE server did not answer"

    def close(self) -> None:
        """Kill the server (hung reads fail with ENOTCONN, hung readers can exit), unmount."""
        self.proc.kill()
        self.proc.wait()
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.umount2(os.fsencode(self.mountpoint), MNT_DETACH)


def say(line: str) -> None:
    sys.stdout.write(line + "\n")  # one write: the serving thread and main() both talk
    sys.stdout.flush()


def main(mountpoint: str, name: str, source: str) -> None:
    fs = HungFS(Path(mountpoint), name, Path(source).read_bytes())
    fs.mount()
    say("mounted")
    for line in sys.stdin:  # "START END": the bytes whose reads hang from now on
        start, end = map(int, line.split())
        fs.hang = (start, end)
        say("ok")


if __name__ == "__main__":
    main(*sys.argv[1:])
