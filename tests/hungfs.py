"""A FUSE file system whose calls can hang: what a hung network mount does to a reader.

Pure Python on the kernel's FUSE protocol (/dev/fuse, mounted with mount(2) through ctypes): no
libfuse, no package. It serves copies of real media files, in folders; told to, it leaves
requests unanswered, so the caller waits in the kernel, in the state an NFS call waits in when its
server is gone (once the server has the request, not even SIGKILL ends the wait:
``request_wait_answer``): the reads of a byte range (``hang(start, end)``), the lookup of a name
(``hang_lookup``: open, stat of that name), the attributes of a name (``hang_getattr``: stat) or
the listing of a folder (``hang_readdir``: scandir), or every write (``hang_writes``: creating a file or a folder, writing,
renaming; else a write fails, ENOSYS: the mount is read-only). ``release()`` answers every held request
and hangs nothing more: the mount came back.

The server runs in a process of its own (``python tests/hungfs.py MOUNTPOINT NAME SOURCE...``,
driven by ``HungMount``): a reader hung in the test's own process would otherwise keep the
server's /dev/fuse open, and nothing could end the wait. ``close`` kills the server, which aborts
the connection (the hung calls fail with ENOTCONN, a killed reader exits), and unmounts. Needs
root and /dev/fuse: ``unavailable()`` says why not, for a skip.

    with HungMount(tmp_path / "mnt", "talk.flac", source) as mount:
        mount.hang(0, size)             # every read hangs from now on
    with HungMount(tmp_path / "mnt", {"in/a.flac": a, "in/b.flac": b}) as mount:
        mount.hang_readdir("in")        # listing mnt/in hangs
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
from typing import Optional, Union

# linux/fuse.h
LOOKUP, FORGET, GETATTR, OPEN, READ, RELEASE, FLUSH, INIT, OPENDIR, READDIR, RELEASEDIR, INTERRUPT, DESTROY, \
    BATCH_FORGET = 1, 2, 3, 14, 15, 18, 25, 26, 27, 28, 29, 36, 38, 42
# what writes: a file's creation (CREATE, or MKNOD where CREATE is not served), a folder's, a
# write, a rename, a removal, a change of attributes
WRITES = frozenset({4, 8, 9, 10, 12, 16, 20, 35, 45})  # SETATTR MKNOD MKDIR UNLINK RENAME WRITE FSYNC CREATE RENAME2
NO_REPLY = (FORGET, BATCH_FORGET, INTERRUPT)
IN_HEADER = struct.Struct("<IIQQIIIHH")  # len, opcode, unique, nodeid, uid, gid, pid, extlen, pad
OUT_HEADER = struct.Struct("<IiQ")  # len, error, unique
ATTR = struct.Struct("<QQQQQQIIIIIIIIII")  # ino size blocks a/m/ctime, nsecs, mode nlink uid gid rdev blksize flags
READ_IN = struct.Struct("<QQI")  # fh, offset, size (the rest unused)
FUSE_PARALLEL_DIROPS = 1 << 18
FOPEN_DIRECT_IO = 1  # every read() reaches us: no page cache between the reader and the hang
DIRENT = struct.Struct("<QQII")  # ino, off (of the next entry), namelen, type; then the name, padded to 8
ROOT = 1
MS_NOSUID, MS_NODEV, MNT_DETACH = 2, 4, 2


class Node:
    def __init__(self, ino: int, name: str, path: str, data: Optional[bytes]):
        self.ino, self.name, self.path, self.data = ino, name, path, data  # data None: a folder
        self.children: dict[str, "Node"] = {}


class HungFS:
    def __init__(self, mountpoint: Path, files: dict[str, bytes]):
        self.mountpoint = Path(mountpoint)
        self.nodes = {ROOT: Node(ROOT, "", "", None)}
        for path, data in files.items():
            self._add(path, data)
        self.hang: Optional[tuple[int, int]] = None  # [start, end) bytes whose reads get no answer
        self.hung_names: dict[int, set[str]] = {LOOKUP: set(), GETATTR: set(), READDIR: set()}
        self.hung_writes = False
        self.held: list[tuple[int, int, int, bytes]] = []  # the requests left unanswered
        self.lock = threading.Lock()
        self.fd = -1

    def _add(self, path: str, data: bytes) -> None:
        parent = self.nodes[ROOT]
        parts = path.split("/")
        for i, part in enumerate(parts):
            if part not in parent.children:
                node = Node(len(self.nodes) + 1, part, "/".join(parts[:i + 1]), data if i == len(parts) - 1 else None)
                self.nodes[node.ino] = parent.children[part] = node
            parent = parent.children[part]

    def mount(self) -> None:
        self.fd = os.open("/dev/fuse", os.O_RDWR)
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        options = f"fd={self.fd},rootmode=40000,user_id=0,group_id=0".encode()
        if libc.mount(b"hungfs", os.fsencode(self.mountpoint), b"fuse", MS_NOSUID | MS_NODEV, options) != 0:
            os.close(self.fd)
            raise OSError(ctypes.get_errno(), f"mount fuse on {self.mountpoint}: {os.strerror(ctypes.get_errno())}")
        threading.Thread(target=self._serve, daemon=True).start()

    def release(self) -> None:
        """Hang nothing more, and answer every request held so far."""
        with self.lock:
            self.hang, self.hung_writes = None, False
            for names in self.hung_names.values():
                names.clear()
            held, self.held = self.held, []
        for request in held:
            self._handle(*request)

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
            if opcode in NO_REPLY:
                continue
            if self._handle(unique, opcode, node, request[IN_HEADER.size:size]) == DESTROY:
                return

    def _handle(self, unique: int, opcode: int, node: int, body: bytes) -> int:
        with self.lock:
            if self._hangs(opcode, node, body):
                self.held.append((unique, opcode, node, body))
                say(f"hung {opcode}")  # tells HungMount
                return opcode  # no answer until release()
        try:
            answer = self._answer(opcode, node, body)
        except OSError as e:
            self._reply(unique, -e.errno)
            return opcode
        self._reply(unique, 0, answer)
        return opcode

    def _hangs(self, opcode: int, node: int, body: bytes) -> bool:
        if opcode in WRITES:
            return self.hung_writes
        if opcode == READ:
            _fh, offset, size = READ_IN.unpack_from(body)
            return bool(self.hang and offset < self.hang[1] and offset + size > self.hang[0])
        if opcode == LOOKUP:
            return body.rstrip(b"\0").decode() in self.hung_names[LOOKUP]
        if opcode in (GETATTR, READDIR) and node in self.nodes:
            return self.nodes[node].path in self.hung_names[opcode]
        return False

    def _reply(self, unique: int, error: int, payload: bytes = b"") -> None:
        with contextlib.suppress(OSError):  # the kernel dropped the request: its reader was killed
            os.write(self.fd, OUT_HEADER.pack(OUT_HEADER.size + len(payload), error, unique) + payload)

    def _answer(self, opcode: int, node: int, body: bytes) -> bytes:
        if opcode == INIT:
            major, minor, readahead, flags = struct.unpack_from("<IIII", body)
            # major, minor, max_readahead, flags, max_background, congestion, max_write, time_gran,
            # max_pages, map_alignment, flags2, unused[7]: 64 bytes. Parallel lookups in a folder,
            # as on NFS: else the kernel holds the folder's lock during a lookup, and one hung
            # name would hang every other lookup there.
            return struct.pack("<IIIIHHIIHHI7I", 7, 31, readahead, flags & FUSE_PARALLEL_DIROPS, 16, 12, 1 << 17, 1,
                               32, 0, 0, *[0] * 7)
        if opcode == LOOKUP:
            child = self._node(node).children.get(body.rstrip(b"\0").decode())
            if child is None:
                raise OSError(errno.ENOENT, "")
            # the name is remembered for 60 s, its attributes never (every stat asks: GETATTR can hang)
            return struct.pack("<QQQQII", child.ino, 0, 60, 0, 0, 0) + self._attr(child)
        if opcode == GETATTR:
            return struct.pack("<QII", 0, 0, 0) + self._attr(self._node(node))
        if opcode in (OPEN, OPENDIR):
            return struct.pack("<QIi", 0, FOPEN_DIRECT_IO if opcode == OPEN else 0, 0)
        if opcode == READ:
            _fh, offset, size = READ_IN.unpack_from(body)
            return self._node(node).data[offset:offset + size]
        if opcode == READDIR:
            _fh, offset, size = READ_IN.unpack_from(body)
            return self._entries(self._node(node), offset, size)
        if opcode in (FLUSH, RELEASE, RELEASEDIR, DESTROY):
            return b""
        raise OSError(errno.ENOSYS, "")

    def _node(self, ino: int) -> Node:
        if ino not in self.nodes:
            raise OSError(errno.ENOENT, "")
        return self.nodes[ino]

    def _entries(self, folder: Node, offset: int, size: int) -> bytes:
        """The fuse_dirents of ``folder`` from the ``offset``-th, as many as fit in ``size``."""
        out = b""
        for i, child in enumerate(list(folder.children.values())[offset:], start=offset + 1):
            name = child.name.encode()
            entry = DIRENT.pack(child.ino, i, len(name), 4 if child.data is None else 8) + name
            entry += b"\0" * (-len(entry) % 8)
            if len(out) + len(entry) > size:
                break
            out += entry
        return out

    def _attr(self, node: Node) -> bytes:
        if node.data is None:
            mode, size, nlink = stat.S_IFDIR | 0o755, 0, 2
        else:
            mode, size, nlink = stat.S_IFREG | 0o644, len(node.data), 1
        return ATTR.pack(node.ino, size, (size + 511) // 512, 0, 0, 0, 0, 0, 0, mode, nlink, 0, 0, 0, 4096, 0)


def unavailable() -> Optional[str]:
    """Why no FUSE file system can be mounted here (None: one can)."""
    if os.geteuid() != 0:
        return "mounting a FUSE file system needs root"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse on this machine"
    return None


class HungMount:
    """The test's side: starts the server process, tells it what hangs, ends it. ``files``:
    the source of one file named ``name`` (``path`` is it on the mount), or {relative path: source}."""

    def __init__(self, mountpoint: Path, name: Union[str, dict[str, Path]], source: Optional[Path] = None):
        self.mountpoint = Path(mountpoint)
        files = {name: Path(source)} if isinstance(name, str) else name
        first = next(iter(files))
        self.path, self.size = self.mountpoint / first, files[first].stat().st_size
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        pairs = [str(part) for item in files.items() for part in item]
        self.proc = subprocess.Popen([sys.executable, __file__, str(mountpoint), *pairs],
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
        self._tell(f"read {start} {end}")

    def hang_lookup(self, name: str) -> None:
        """Looking up an entry of this name (in any folder: open, stat...) gets no answer."""
        self._tell(f"lookup {name}")

    def hang_getattr(self, path: str) -> None:
        """The attributes (stat) of ``path`` (relative to the mount) get no answer."""
        self._tell(f"getattr {path}")

    def hang_readdir(self, path: str) -> None:
        """Listing the folder ``path`` (relative to the mount) gets no answer."""
        self._tell(f"readdir {path}")

    def hang_writes(self) -> None:
        """Every write (creating a file or a folder, writing, renaming) gets no answer from now on."""
        self._tell("writes")

    def release(self) -> None:
        """The mount answers again: every held request is answered, nothing hangs any more."""
        self.hung.clear()
        self._tell("release")

    def _tell(self, command: str) -> None:
        self.acked.clear()
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        assert self.acked.wait(10), "the FUSE server did not answer"

    def close(self) -> None:
        """Kill the server (hung calls fail with ENOTCONN, hung readers can exit), unmount."""
        self.proc.kill()
        self.proc.wait()
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.umount2(os.fsencode(self.mountpoint), MNT_DETACH)


def say(line: str) -> None:
    sys.stdout.write(line + "\n")  # one write: the serving thread and main() both talk
    sys.stdout.flush()


def main(mountpoint: str, *pairs: str) -> None:
    files = {pairs[i]: Path(pairs[i + 1]).read_bytes() for i in range(0, len(pairs), 2)}
    fs = HungFS(Path(mountpoint), files)
    fs.mount()
    say("mounted")
    for line in sys.stdin:  # "read START END", "lookup NAME", "getattr PATH", "readdir PATH", "writes", "release"
        what, *args = line.split(maxsplit=1 if not line.startswith("read ") else 2)
        with fs.lock:
            if what == "read":
                fs.hang = (int(args[0]), int(args[1]))
            elif what == "writes":
                fs.hung_writes = True
            elif what != "release":
                fs.hung_names[{"lookup": LOOKUP, "getattr": GETATTR, "readdir": READDIR}[what]].add(args[0].strip())
        if what == "release":
            fs.release()
        say("ok")


if __name__ == "__main__":
    main(*sys.argv[1:])
